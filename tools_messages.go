package main

// This file holds the handlers of the message tools, each named after its
// tool (toolGetUnreadMessages is get_unread_messages), and the renderings of
// their results; tools_groups.go has the group and membership tools. The
// table in tools.go lists them.

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
)

// messageReader makes a retrieval tool: the caller's identity checked in
// the original's order, then read, whose messages it renders.
func messageReader(read func(s *server, a toolArgs, contextID, name string) ([]message, error)) func(*server, toolArgs) (any, error) {
	return func(s *server, a toolArgs) (any, error) {
		contextID, name, err := a.identity()
		if err != nil {
			return nil, err
		}
		msgs, err := read(s, a, contextID, name)
		return messagesObject(msgs), err
	}
}

var toolGetAllMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	return s.store.messagesAfter(s.request, a.groupID(), contextID, name, 0)
})

var toolGetLatestMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	return s.store.latestMessages(s.request, a.groupID(), contextID, name)
})

var toolGetUnreadMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	return s.store.unreadMessages(s.request, a.groupID(), contextID, name, "")
})

var toolGetMessagesAfter = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	// Of a valid JSON value ParseInt reads only an integer, which Python
	// reads as an int ("-0" is 0); fractions and exponents make a float there.
	after, err := strconv.ParseInt(string(a.values["after_message_id"]), 10, 64)
	if err != nil || after < 0 {
		return nil, validationErrorf("after_message_id must be a non-negative integer.")
	}
	return s.store.messagesAfter(s.request, a.groupID(), contextID, name, after)
})

var toolSearchMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	query, err := a.nonEmpty("query")
	if err != nil {
		return nil, err
	}
	return s.store.searchMessages(s.request, a.groupID(), contextID, name, query)
})

// toolSendMessage is the send_message tool when a send runs alone; sends a
// client pipelines to one group go through jsonrpc_groupcommit.go, with the
// same parseSend, several in one transaction.
func toolSendMessage(s *server, a toolArgs) (any, error) {
	m, err := parseSend(a)
	if err != nil {
		return nil, err
	}
	outs, errs, err := s.store.sendMessages(s.request, a.groupID(), []outgoing{m})
	if err != nil {
		return nil, err
	}
	return sentObject(outs[0]), errs[0] // as storeSends answers each send of a run
}

// parseSend checks send_message's arguments beyond their schema.
func parseSend(a toolArgs) (outgoing, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return outgoing{}, err
	}
	text, err := a.nonEmpty("message")
	if err != nil {
		return outgoing{}, err
	}
	if a.maxMessageBytes > 0 && len(text) > a.maxMessageBytes {
		return outgoing{}, validationErrorf("message is longer than %s (%d bytes).", maxMessageBytesVar, a.maxMessageBytes)
	}
	// A null item decodes as "", which is blank; any other non-string fails.
	var wake []string
	if !a.isNull("wake_context_ids") {
		err := json.Unmarshal(a.values["wake_context_ids"], &wake)
		if err != nil || slices.ContainsFunc(wake, isBlank) {
			return outgoing{}, validationErrorf("wake_context_ids must be an array of non-empty context IDs.")
		}
	}
	priority := "normal"
	if a.has("priority") {
		priority, _ = a.str("priority")
	}
	if !slices.Contains([]string{"low", "normal", "high", "urgent"}, priority) {
		return outgoing{}, validationErrorf("priority must be one of: low, normal, high, urgent.")
	}
	return outgoing{contextID: contextID, name: name, text: text, priority: priority, wake: wake, token: a.tokenName}, nil
}

// maxMessageBytesVar limits send_message's text, in bytes of UTF-8.
const maxMessageBytesVar = "CROSSTALK_MAX_MESSAGE_BYTES"

// messageLimitFromEnv validates CROSSTALK_MAX_MESSAGE_BYTES: unset or empty
// means no limit; anything but a positive whole number is a start-up error.
func messageLimitFromEnv() (int, error) {
	v := os.Getenv(maxMessageBytesVar)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s must be a positive whole number of bytes", maxMessageBytesVar)
	}
	return n, nil
}

// sentObject is send_message's result.
func sentObject(out sent) object {
	return object{
		{"message_id", out.messageID}, {"group_id", out.groupID}, {"priority", out.priority},
		{"mentions", stringList(out.mentions)}, {"routing_reason", out.routingReason},
		{"wakeup_targets", stringList(out.wakeupTargets)},
	}
}

// messagesObject is the result of the message retrieval tools, each message
// with the original's keys and order.
func messagesObject(msgs []message) object {
	return object{{"messages", mapSlice(msgs, func(m message) any {
		return object{{"id", m.id}, {"context_id", m.contextID}, {"name", m.name}, {"message", m.text}, {"priority", m.priority},
			{"mentions", stringList(m.mentions)}, {"wakeup_targets", stringList(m.wakeupTargets)},
			{"routing_reason", m.routingReason}, {"sent_at", m.sentAt}}
	})}}
}

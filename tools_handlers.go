package main

// This file holds the 14 tool handlers, each named after its tool
// (toolGetUsers is get_users), and the renderings of their results. The
// table in tools.go lists them.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
)

func toolCreateGroup(s *server, a toolArgs) (any, error) {
	contextID, err := a.nonEmpty("context_id")
	if err != nil {
		return nil, err
	}
	name, nameOK := a.str("name")
	desc, descOK := a.str("description")
	if (a.has("name") && !nameOK) || (a.has("description") && !descOK) {
		return nil, validationErrorf("name and description must be strings.")
	}
	meta, err := s.store.createGroup(contextID, name, desc)
	if err != nil {
		return nil, err
	}
	return metaObject(meta), nil
}

func toolListGroups(s *server, _ toolArgs) (any, error) {
	groups, err := s.store.listGroups()
	if err != nil {
		return nil, err
	}
	list := make([]any, len(groups))
	for i, g := range groups {
		list[i] = metaObject(g)
	}
	return object{{"groups", list}}, nil
}

func toolGetGroupMetadata(s *server, a toolArgs) (any, error) {
	meta, err := s.store.groupMetadata(a.groupID())
	if err != nil {
		return nil, err
	}
	return metaObject(meta), nil
}

func toolUpdateGroupMetadata(s *server, a toolArgs) (any, error) {
	contextID, err := a.nonEmpty("context_id")
	if err != nil {
		return nil, err
	}
	if a.isNull("name") && a.isNull("description") {
		return nil, validationErrorf("Provide name and/or description to update group metadata.")
	}
	var name, desc *string
	for _, f := range []struct {
		key string
		dst **string
	}{{"name", &name}, {"description", &desc}} {
		if a.isNull(f.key) {
			continue
		}
		v, ok := a.str(f.key)
		if !ok {
			return nil, validationErrorf("%s must be a string.", f.key)
		}
		*f.dst = &v
	}
	meta, err := s.store.updateGroupMetadata(a.groupID(), contextID, name, desc)
	if err != nil {
		return nil, err
	}
	return metaObject(meta), nil
}

func toolGetUsers(s *server, a toolArgs) (any, error) {
	members, err := s.store.users(a.groupID())
	if err != nil {
		return nil, err
	}
	list := make([]any, len(members))
	for i, m := range members {
		list[i] = object{{"context_id", m.contextID}, {"name", m.name}, {"joined_at", m.joinedAt}, {"latest_message_id", m.latestMessageID}}
	}
	return object{{"users", list}}, nil
}

func toolDeleteGroup(s *server, a toolArgs) (any, error) {
	contextID, err := a.nonEmpty("context_id")
	if err != nil {
		return nil, err
	}
	id := a.groupID()
	if err := s.store.deleteGroup(id, contextID); err != nil {
		return nil, err
	}
	return object{{"group_id", id}, {"deleted", true}}, nil
}

func toolJoinGroup(s *server, a toolArgs) (any, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return nil, err
	}
	id := a.groupID()
	if err := s.store.joinGroup(id, contextID, name); err != nil {
		return nil, err
	}
	uri := wakeupURI(id, contextID)
	if !a.stateless {
		// The session is now subscribed to its own wakeups. A 2026-07-28
		// client opens subscriptions/listen instead, which authorizes by
		// membership (jsonrpc_listen.go).
		s.subs.authorize(uri)
		if err := s.subs.subscribe(uri); err != nil {
			return nil, err
		}
	}
	return object{{"group_id", id}, {"joined", true}, {"wakeup_resource_uri", uri}}, nil
}

func toolLeaveGroup(s *server, a toolArgs) (any, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return nil, err
	}
	id := a.groupID()
	if err := s.store.leaveGroup(id, contextID, name, true); err != nil {
		return nil, err
	}
	s.subs.revoke(wakeupURI(id, contextID))
	return object{{"group_id", id}, {"left", true}}, nil
}

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
	return s.store.messagesAfter(a.groupID(), contextID, name, 0)
})

var toolGetLatestMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	return s.store.latestMessages(a.groupID(), contextID, name)
})

var toolGetUnreadMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	return s.store.unreadMessages(a.groupID(), contextID, name)
})

// nonNegativeInteger matches the JSON integers Python reads as an int of at
// least zero ("-0" is 0); fractions and exponents make a float there.
var nonNegativeInteger = regexp.MustCompile(`^(-?0|[1-9][0-9]*)$`)

var toolGetMessagesAfter = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	raw := string(a.values["after_message_id"])
	after, err := strconv.ParseInt(raw, 10, 64)
	if !nonNegativeInteger.MatchString(raw) || err != nil {
		return nil, validationErrorf("after_message_id must be a non-negative integer.")
	}
	return s.store.messagesAfter(a.groupID(), contextID, name, after)
})

var toolSearchMessages = messageReader(func(s *server, a toolArgs, contextID, name string) ([]message, error) {
	query, err := a.nonEmpty("query")
	if err != nil {
		return nil, err
	}
	return s.store.searchMessages(a.groupID(), contextID, name, query)
})

// toolSendMessage is the send_message tool when a send runs alone. Sends a
// client pipelines to one group run through jsonrpc_groupcommit.go, which
// parses each with the same parseSend and stores it with the same
// sendBatch, several in one transaction.
func toolSendMessage(s *server, a toolArgs) (any, error) {
	m, err := parseSend(a)
	if err != nil {
		return nil, err
	}
	outs, errs, err := s.store.sendMessages(s.request, a.groupID(), []outgoing{m})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return nil, err
	}
	return sentObject(outs[0]), nil
}

// parseSend checks send_message's arguments beyond their schema.
func parseSend(a toolArgs) (outgoing, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return outgoing{}, err
	}
	text, err := a.nonEmpty("message")
	if err == nil && a.maxMessageBytes > 0 && len(text) > a.maxMessageBytes {
		err = validationErrorf("message is longer than %s (%d bytes).", maxMessageBytesVar, a.maxMessageBytes)
	}
	if err != nil {
		return outgoing{}, err
	}
	var wake []string
	if !a.isNull("wake_context_ids") {
		var items []json.RawMessage
		if json.Unmarshal(a.values["wake_context_ids"], &items) != nil || items == nil {
			return outgoing{}, validationErrorf("wake_context_ids must be an array of non-empty context IDs.")
		}
		for _, raw := range items {
			var id string
			if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &id) != nil || isBlank(id) {
				return outgoing{}, validationErrorf("wake_context_ids must be an array of non-empty context IDs.")
			}
			wake = append(wake, id)
		}
	}
	priority := "normal"
	if a.has("priority") {
		priority, _ = a.str("priority")
	}
	switch priority {
	case "low", "normal", "high", "urgent":
	default:
		return outgoing{}, validationErrorf("priority must be one of: low, normal, high, urgent.")
	}
	return outgoing{contextID: contextID, name: name, text: text, priority: priority, wake: wake}, nil
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

// metaObject renders a group's metadata with the original's keys; the
// timestamps are left out for a catalog row that has none.
func metaObject(m groupMeta) object {
	o := object{{"group_id", m.groupID}, {"name", m.name}, {"description", m.description}}
	if m.updatedAt != nil || m.createdAt != nil {
		o = append(o, field{"created_at", m.createdAt}, field{"updated_at", m.updatedAt})
	}
	return o
}

// messagesObject is the result of the message retrieval tools, with the
// original's keys in its order.
func messagesObject(msgs []message) object {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = object{{"id", m.id}, {"context_id", m.contextID}, {"name", m.name}, {"message", m.text},
			{"priority", m.priority}, {"mentions", stringList(m.mentions)}, {"wakeup_targets", stringList(m.wakeupTargets)},
			{"routing_reason", m.routingReason}, {"sent_at", m.sentAt}}
	}
	return object{{"messages", list}}
}

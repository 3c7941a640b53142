package main

import "strconv"

// channelMethod is a Claude Code channel event (research preview, Claude
// Code 2.1.80 or later; https://code.claude.com/docs/en/channels-reference.md).
// A server declaring capabilities.experimental["claude/channel"] has each one,
// params {content, meta}, reach the model as <channel source="crosstalk"
// key="value"…>content</channel>; meta keys must be identifiers. Claude Code
// listens only when started with `--dangerously-load-development-channels
// server:<name>` and says nothing of it in its capabilities, so the server
// declares and pushes only when CROSSTALK_CHANNELS=1 says it was.
const channelMethod = "notifications/claude/channel"

// channelMaxBytes bounds a pushed message like a hook's answer: the rest
// waits for get_unread_messages.
const channelMaxBytes = 8 << 10

// channelCapability is the experimental capability the docs require.
var channelCapability = field{"experimental", object{{"claude/channel", object{}}}}

// channelInstructions tells the model what the pushes are and how to answer.
const channelInstructions = `Messages sent to you in crosstalk groups arrive as <channel source="crosstalk" group_id=… group_name=… from=… message_id=… priority=…>. ` +
	`They stay unread: reply with send_message using that group_id and the context_id you joined the group with, and call get_unread_messages to mark them read. ` +
	`When you have nothing else to do, call wait_for_messages to wait for the next message.`

// channelsEnabled reads CROSSTALK_CHANNELS: exactly "1" turns channels on.
func channelsEnabled(value string) bool { return pyStrip(value) == "1" }

// pushChannel sends wake event eventID of sub's member as a channel event,
// when no other path has delivered its message; the poller calls it only
// when this session pushes them (m.channels).
// The claim comes first, as a hook's does, so a racing hook or waiter stays
// silent about it; the message stays unread, since the agent reads it
// through the tools to answer it. A failed claim (rolled back) or a push
// not written (its claim released) returns its error: the event is retried.
func (m *subscriptions) pushChannel(sub subscription, eventID int64) error {
	n, err := m.store.claimForChannel(sub.groupID, sub.contextID, eventID)
	if err != nil {
		logf("push wakeup %d of %s to channel: %v", eventID, sub.groupID, err)
		return err
	}
	if n != nil {
		if err = m.notify(channelMethod, channelParams(n)); err != nil { // it reached no one: hooks and waiters may deliver it
			m.store.releaseClaim(sub.groupID, sub.contextID, viaChannel, []int64{n.messageID})
		}
	}
	return err
}

// channelParams is the notification's params for notice n.
func channelParams(n *wakeNotice) object {
	text := n.text
	if len(text) > channelMaxBytes {
		text = truncateUTF8(text, channelMaxBytes) + "\n[cut at " + strconv.Itoa(channelMaxBytes) + " of " + strconv.Itoa(len(n.text)) +
			" bytes: get_unread_messages shows the whole message]"
	}
	return object{{"content", text}, {"meta", object{
		{"group_id", n.groupID}, {"group_name", n.groupName}, {"from", n.sender},
		{"message_id", strconv.FormatInt(n.messageID, 10)}, {"priority", n.priority},
	}}}
}

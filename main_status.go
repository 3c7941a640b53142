package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// statusOptions are `crosstalk-mcp status`'s settings.
type statusOptions struct {
	contextID string
	events    int // wake events listed per group, newest
}

const statusHelp = `usage: crosstalk-mcp status [--context-id ID] [--events N] [--groups-dir PATH]

Summarize a member's groups, unread mail, wakeup delivery states and the
receipts of the messages it sent.

options:
  --context-id ID     the member's context_id (default: $CROSSTALK_CONTEXT_ID)
  --events N          wake events and sent messages shown per group, newest
                      first (default: 5)
  --groups-dir PATH   the groups directory (default: $CROSSTALK_GROUPS_DIR, else
                      ~/.cache/crosstalk)
`

// runStatus prints a short text summary of one member: its groups, unread
// counts and pending wakeups, and how far each recent wake event got
// (created → notified → delivered by hook, wait, tool or channel → read),
// and, for the messages it sent, how far each got with every recipient.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	contextID := fs.String("context-id", "", "")
	events := fs.Int("events", 5, "")
	groupsDir := fs.String("groups-dir", "", "")
	err := parseFlags(fs, args)
	opts := statusOptions{contextID: resolveContextID("", *contextID), events: *events}
	if err == nil && opts.contextID == "" {
		err = errors.New("--context-id is required (or CROSSTALK_CONTEXT_ID)")
	}
	if err != nil {
		return commandExit("status", statusHelp, err, stdout, stderr)
	}
	st, err := openCommandStore("status", *groupsDir, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp status: %v\n", err)
		return 1
	}
	defer st.close()
	text, err := memberStatus(st, opts)
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp status: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, text)
	return 0
}

// memberStatus renders the summary runStatus prints.
func memberStatus(st *store, opts statusOptions) (string, error) {
	groups, err := st.memberships(opts.contextID)
	if err != nil {
		return "", err
	}
	var unread, wakes int64
	for _, g := range groups {
		unread += g.unread
		wakes += g.wakeups
	}
	var b strings.Builder
	fmt.Fprintf(&b, "context_id %s: %s, %s, %s\n", opts.contextID,
		plural(int64(len(groups)), "group"), plural(unread, "unread message"), plural(wakes, "pending wakeup"))
	for _, g := range groups {
		name := g.groupName
		if name == "" {
			name = "(unnamed)"
		}
		fmt.Fprintf(&b, "- %s %q as %q: %s, %s\n", g.groupID, name, g.name, plural(g.unread, "unread"), plural(g.wakeups, "pending wakeup"))
		var ds []delivery
		err := st.withHandle(g.groupID, func(h *groupHandle) (err error) {
			ds, err = wakeupDeliveries(h.db, opts.contextID, opts.events)
			return err
		})
		if err != nil {
			return "", err
		}
		for _, d := range ds {
			b.WriteString("    " + describeDelivery(d) + "\n")
		}
		if err := sentStatus(&b, st, g.groupID, opts); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// sentStatus writes the receipts of the member's newest opts.events
// messages in one group: for each, how far it got with every recipient.
func sentStatus(b *strings.Builder, st *store, groupID string, opts statusOptions) error {
	ids, byMessage, err := st.sentReceipts(groupID, opts.contextID)
	if err != nil {
		return err
	}
	if len(ids) > opts.events {
		ids = ids[len(ids)-opts.events:]
	}
	for _, id := range ids {
		fmt.Fprintf(b, "    sent message %d: %s\n", id, describeReceipts(byMessage[id]))
	}
	return nil
}

// describeDelivery is one wake event's line: each state with its time.
func describeDelivery(d delivery) string {
	at := func(ts *string) string {
		if ts == nil {
			return "-"
		}
		return *ts
	}
	delivered := at(d.deliveredAt)
	if d.deliveredAt != nil {
		delivered += " by " + d.deliveredVia
	}
	return fmt.Sprintf("message %d (%s, %s) %s: created %s, notified %s, delivered %s, read %s",
		d.messageID, d.relevance, d.priority, d.state(), d.createdAt, at(d.notifiedAt), delivered, at(d.readAt))
}

// plural renders "1 group" or "2 groups"; "unread" stays as it is.
func plural(n int64, noun string) string {
	if n == 1 || noun == "unread" {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

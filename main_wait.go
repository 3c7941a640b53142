package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// waitOptions are `crosstalk-mcp wait`'s settings.
type waitOptions struct {
	contextID string
	timeout   time.Duration
	// safetyPoll is how often every group is checked even without a file
	// event: events cannot see writes made on another machine sharing the
	// directory, and some platforms have none.
	safetyPoll time.Duration
}

// Exit statuses of `wait`, Claude Code's asyncRewake contract: 2 wakes the
// agent with stderr as a system reminder; 0 ends quietly.
const (
	waitWoke     = 2
	waitTimedOut = 0
)

// defaultWaitTimeout ends a waiter a little before the hour for which
// `hooks install` lets Claude Code run it; the next Stop or SessionStart
// starts a new one.
const defaultWaitTimeout = 55 * time.Minute

const waitHelp = `usage: crosstalk-mcp wait [--client NAME] [--timeout D] [--context-id ID] [--groups-dir PATH]

Block until the member has a wake event no waiter has delivered yet, then print
it on stderr and exit 2 (Claude Code's asyncRewake hook); exit 0 silently at
the timeout. Any failure, a usage error included, exits 0 with one line on
stderr, since exit 2 would wake the agent.

options:
  --client NAME       whose hook payload stdin holds (default: claude-code)
  --timeout D         give up after this long, as a Go duration (default: 55m)
  --context-id ID     the member, instead of the payload's session id (default:
                      $CROSSTALK_CONTEXT_ID)
  --groups-dir PATH   the server's groups directory (default:
                      $CROSSTALK_GROUPS_DIR, else ~/.cache/crosstalk)
`

// runWait blocks until the member has a wake event no waiter has delivered
// yet, then prints it on stderr and exits 2, having recorded it delivered
// by wait; at the timeout it exits 0 silently. It runs as a background
// (asyncRewake) hook, so it reads the hook payload for the session id, and
// like a hook it never fails loudly: errors exit 0 with one stderr line.
// A closed stderr does not kill it with SIGPIPE: it still exits 2, and the
// mail it could not quote waits unread for the next hook.
func runWait(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	signal.Ignore(syscall.SIGPIPE)
	fail := func(err error) int {
		fmt.Fprintf(stderr, "crosstalk-mcp wait: %v\n", err)
		return 0
	}
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	client := fs.String("client", "claude-code", "")
	contextID := fs.String("context-id", "", "")
	timeout := fs.Duration("timeout", defaultWaitTimeout, "")
	groupsDir := fs.String("groups-dir", "", "")
	if err := parseFlags(fs, args); err != nil {
		commandExit("wait", waitHelp, err, stdout, stderr)
		return waitTimedOut
	}
	opts, err := parseWaitOptions(*client, *contextID, *timeout, stdin)
	if err != nil {
		return fail(err)
	}
	st, err := openCommandStore("wait", *groupsDir, stderr)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	w := newChangeWatcher(st.dir)
	defer w.close()
	n, err := waitForWakeup(st, w, opts)
	if err != nil {
		return fail(err)
	}
	if n == nil {
		return waitTimedOut
	}
	fmt.Fprintln(stderr, formatWakeNotice(opts.contextID, n))
	return waitWoke
}

// parseWaitOptions reads, without a context id from the command line, the
// client's hook payload on stdin for its session id.
func parseWaitOptions(client, contextID string, timeout time.Duration, stdin io.Reader) (waitOptions, error) {
	c, err := hookClientNamed(client)
	if err != nil {
		return waitOptions{}, err
	}
	fromPayload := ""
	if contextID == "" && !isTerminal(stdin) {
		raw, err := io.ReadAll(stdin)
		if err != nil {
			return waitOptions{}, fmt.Errorf("read %s payload: %w", c.name, err)
		}
		var p hookPayload
		if jsonObject(raw, &p) {
			fromPayload = p.str(c.sessionKeys...)
		}
	}
	id := resolveContextID(fromPayload, contextID)
	if id == "" {
		return waitOptions{}, fmt.Errorf("%w: no session id on stdin, no --context-id and no CROSSTALK_CONTEXT_ID", errNoIdentity)
	}
	return waitOptions{contextID: id, timeout: timeout, safetyPoll: 2 * time.Second}, nil
}

// isTerminal reports whether r is an interactive terminal, which `wait`
// must not read a payload from: nothing would ever arrive.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// waitForWakeup checks the member's groups now, then again for each group
// the watcher names and, as a safety net, all of them every safetyPoll,
// until a wake event is claimed or the timeout passes (nil, nil). Its
// watcher subscription follows the member's groups as of the last full
// check, so writes to other groups wake it no further than the event read;
// a group joined meanwhile is found by the next full check.
func waitForWakeup(st *store, w *changeWatcher, opts waitOptions) (*wakeNotice, error) {
	sub := w.subscribeTo([]string{})
	defer sub.close()
	deadline := time.NewTimer(opts.timeout)
	defer deadline.Stop()
	poll := opts.safetyPoll
	if !w.native {
		poll = min(poll, 500*time.Millisecond)
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var member map[string]membership
	only := map[string]bool(nil) // nil: check every group
	for {
		var n *wakeNotice
		var err error
		if only == nil {
			n, member, err = claimWakeupWatching(st, opts.contextID, sub)
		} else {
			n, err = claimNamedWakeup(st, opts.contextID, member, only)
		}
		if err != nil || n != nil {
			return n, err
		}
		select {
		case <-deadline.C:
			return nil, nil
		case <-tick.C:
			only = nil
		case <-sub.C:
			groups, all := sub.take()
			only = map[string]bool{}
			for _, g := range groups {
				only[g] = true
			}
			if all {
				only = nil
			}
		}
	}
}

// claimWakeupWatching reads the member's groups, points sub at them and
// claims the first claimable wake event among them; it returns the groups
// by id for the event-driven checks that follow.
func claimWakeupWatching(st *store, contextID string, sub *watchSubscription) (*wakeNotice, map[string]membership, error) {
	groups, err := st.memberships(contextID)
	if err != nil {
		return nil, nil, err
	}
	member := make(map[string]membership, len(groups))
	ids := make([]string, 0, len(groups))
	for _, g := range groups {
		member[g.groupID] = g
		ids = append(ids, g.groupID)
	}
	sub.watchGroups(ids)
	n, err := claimFirstWakeup(st, contextID, groups)
	return n, member, err
}

// claimNamedWakeup claims the first claimable wake event in the member's
// groups named by only. Their wake counts may predate the write that named
// them, so each is checked whatever its count.
func claimNamedWakeup(st *store, contextID string, member map[string]membership, only map[string]bool) (*wakeNotice, error) {
	var groups []membership
	for id := range only {
		if g, ok := member[id]; ok {
			g.wakeups = max(g.wakeups, 1)
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b membership) int { return strings.Compare(a.groupID, b.groupID) })
	return claimFirstWakeup(st, contextID, groups)
}

// claimFirstWakeup claims the first claimable wake event in groups,
// skipping groups with no wake event.
func claimFirstWakeup(st *store, contextID string, groups []membership) (*wakeNotice, error) {
	for _, g := range groups {
		if g.wakeups == 0 {
			continue
		}
		var n *wakeNotice
		err := retryBusy(func() (err error) {
			n, err = st.claimWaitWakeup(g, contextID)
			return err
		})
		if err != nil || n != nil {
			return n, err
		}
	}
	return nil, nil
}

// waitNoticeMaxBytes bounds the message text in a wake notice; the agent
// reads the whole message with get_unread_messages.
const waitNoticeMaxBytes = 2 << 10

// formatWakeNotice is what `wait` prints on stderr for the agent.
func formatWakeNotice(contextID string, n *wakeNotice) string {
	text := n.text
	if len(text) > waitNoticeMaxBytes {
		text = truncateUTF8(text, waitNoticeMaxBytes) + " [...]"
	}
	group := n.groupID
	if n.groupName != "" {
		group = fmt.Sprintf("%q (%s)", n.groupName, n.groupID)
	}
	return fmt.Sprintf("Crosstalk: %s wrote in group %s (message %d, priority %s, wakes you: %s):\n%s\n"+
		"Read it and any other new messages with get_unread_messages (group_id %s, context_id %s), then reply if needed.",
		n.sender, group, n.messageID, n.priority, n.relevance, text, n.groupID, contextID)
}

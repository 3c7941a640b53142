package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// waitOptions are `crosstalk-mcp wait`'s settings.
type waitOptions struct {
	contextID  string
	timeout    time.Duration
	safetyPoll time.Duration    // a full check even without a file event, which misses other machines' writes
	grace      time.Duration    // waitGrace outside tests
	alive      func() bool      // when set, asked every livenessPoll whether to go on
	stop       <-chan os.Signal // SIGINT or SIGTERM: end as at the timeout, giving up the slot
}

// livenessPoll is how often a waiter checks that its client and its stdio
// server run and that it is still the session's waiter: a stale one would
// claim mail no one sees. A kill(2), a stat and a read a second cost nothing.
const livenessPoll = time.Second

// Exit statuses of `wait`, Claude Code's asyncRewake contract: 2 wakes the
// agent with stderr as a system reminder; 0 ends quietly.
const (
	waitWoke     = 2
	waitTimedOut = 0
)

// defaultWaitTimeout ends a waiter a little before the hour for which
// `hooks install` lets Claude Code run it.
const defaultWaitTimeout = 55 * time.Minute

const waitHelp = `usage: crosstalk-mcp wait [--client NAME] [--timeout D] [--context-id ID] [--groups-dir PATH]

Block until the member has a wake event nothing has delivered yet, then print
it on stderr, mark it read and exit 2 (Claude Code's asyncRewake hook); exit 0
silently at the timeout, when the client exits or a newer waiter of the
session starts, and at once in a headless Claude Code run or under VS Code.
Any failure, a usage error included, exits 0 with one line on stderr, since
exit 2 would wake the agent.

options:
  --client NAME       whose hook payload stdin holds (default: claude-code)
  --timeout D         give up after this long, as a Go duration (default: 55m)
  --context-id ID     the member, instead of the payload's session id (default:
                      $CROSSTALK_CONTEXT_ID)
  --groups-dir PATH   the server's groups directory (default:
                      $CROSSTALK_GROUPS_DIR, else ~/.cache/crosstalk)
`

// runWait is `crosstalk-mcp wait`, which waitHelp describes. A closed
// stderr does not kill it with SIGPIPE: it still exits 2, and the mail it
// could not quote stays unread and undelivered, for the next hook or waiter.
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
	pid := clientPID()
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, errForeground) ||
		*client == "claude-code" && foregroundArgs(processArgs(pid), os.Getenv) {
		return waitTimedOut
	}
	if err != nil {
		return fail(err)
	}
	st, err := openCommandStore("wait", *groupsDir, stderr)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	slot := waiterSlot(st.dir, opts.contextID)
	release, err := takeWaiterSlot(slot)
	if err != nil {
		return fail(err)
	}
	defer release()
	opts.alive = func() bool { return ownsWaiterSlot(slot) && !clientEnded(st.dir, pid) }
	opts.stop = stopSignals()
	w := newChangeWatcher(st.dir)
	defer w.close()
	n, err := waitForWakeup(st, w, opts)
	if err != nil {
		return fail(err)
	}
	if n == nil {
		return waitTimedOut
	}
	if _, err := fmt.Fprintln(stderr, formatWakeNotice(opts.contextID, n)); err != nil {
		// Nothing reached the agent; with stderr gone, neither can a failed release.
		_ = retryBusy(func() error { return st.releaseClaim(n.groupID, opts.contextID, viaWait, []int64{n.messageID}) })
		return waitWoke
	}
	printed := hookItem{pendingMessage{groupID: n.groupID, msg: message{id: n.messageID}}, n.cut}
	if err := deliverItems(st, opts.contextID, []hookItem{printed}); err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp wait: mark the message read: %v\n", err)
	}
	return waitWoke
}

// parseWaitOptions reads the session id from the client's hook payload on
// stdin when the command line gives no context id, even when
// CROSSTALK_CONTEXT_ID is set, which only stands in for it. The read counts
// against timeout, an os.ErrDeadlineExceeded once over it.
func parseWaitOptions(client, contextID string, timeout time.Duration, stdin io.Reader) (waitOptions, error) {
	c, err := hookClientNamed(client)
	if err != nil {
		return waitOptions{}, err
	}
	fromPayload, start := "", time.Now()
	if contextID == "" && !isTerminal(stdin) {
		var p hookPayload
		read := make(chan error, 1)
		// One JSON value, read up to its end, as a client may leave stdin
		// open; left in its read at the timeout, as the process exits.
		go func() { read <- json.NewDecoder(stdin).Decode(&p) }()
		select {
		case <-time.After(timeout):
			return waitOptions{}, os.ErrDeadlineExceeded
		case <-read: // what is no JSON object names no session
		}
		if _, vscode := p["hookEventName"]; vscode && client == "claude-code" {
			return waitOptions{}, errForeground
		}
		fromPayload = p.str(c.sessionKeys...)
	}
	id := resolveContextID(fromPayload, contextID)
	if id == "" {
		return waitOptions{}, fmt.Errorf("%w: no session id on stdin, no --context-id and no CROSSTALK_CONTEXT_ID", errNoIdentity)
	}
	return waitOptions{contextID: id, timeout: timeout - time.Since(start), safetyPoll: watchSafetyPoll, grace: waitGrace}, nil
}

// errForeground ends a waiter of Claude Code's hooks that VS Code runs, as
// it does those of Claude Code's settings files, sending camelCase fields:
// with no asyncRewake it waits for the waiter, holding its session up.
var errForeground = errors.New("run in the foreground")

// isTerminal reports whether r is an interactive terminal, from which no
// payload would ever arrive.
func isTerminal(r io.Reader) bool {
	f, _ := r.(*os.File) // nil for any other reader: its Stat fails with ErrInvalid
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// waitForWakeup checks the member's groups now, then each group the
// watcher names and all of them every safetyPoll, until a wake event is
// claimed, or nil, nil once nextCheck says to end. The subscription follows
// the groups of the last full check; a group joined since is found by the
// next one.
func waitForWakeup(st *store, w *changeWatcher, opts waitOptions) (*wakeNotice, error) {
	sub := w.subscribeTo([]string{})
	defer sub.close()
	deadline := time.NewTimer(opts.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(opts.safetyPoll)
	defer tick.Stop()
	live := time.NewTicker(livenessPoll)
	defer live.Stop()
	var member map[string]membership
	var only []string // nil: check every group
	for {
		var groups []membership
		if only == nil {
			var err error
			if groups, err = st.memberships(opts.contextID); err != nil {
				return nil, err
			}
			member = make(map[string]membership, len(groups))
			for _, g := range groups {
				member[g.groupID] = g
			}
			sub.watchGroups(slices.Collect(maps.Keys(member)))
			if !w.native.Load() { // no events here, or the watch just failed to start
				tick.Reset(min(opts.safetyPoll, defaultPollInterval))
			}
		} else {
			// A named group's wake count may predate the write that named
			// it, so each is checked whatever its count.
			for _, id := range slices.Sorted(slices.Values(only)) {
				if g, ok := member[id]; ok {
					g.wakeups = max(g.wakeups, 1)
					groups = append(groups, g)
				}
			}
		}
		if n := claimFirstWakeup(st, opts, groups); n != nil {
			return n, nil
		}
		var more bool
		if only, more = nextCheck(sub, tick, live, deadline, opts); !more {
			return nil, nil
		}
	}
}

// nextCheck returns the groups to check next (nil: all of them), or false
// once the timeout passed, a stop signal came or opts.alive said to end.
// After a file event it waits opts.grace, so that the session's own paths
// get the first chance.
func nextCheck(sub *watchSubscription, tick, live *time.Ticker, deadline *time.Timer, opts waitOptions) ([]string, bool) {
	for {
		select {
		case <-deadline.C:
			return nil, false
		case <-opts.stop:
			return nil, false
		case <-live.C:
			if opts.alive != nil && !opts.alive() {
				return nil, false
			}
		case <-tick.C:
			return nil, true
		case <-sub.C:
			groups, all := sub.take()
			select {
			case <-time.After(opts.grace):
			case <-deadline.C:
				return nil, false
			}
			if all {
				return nil, true
			}
			return append([]string{}, groups...), true
		}
	}
}

// claimFirstWakeup claims the first claimable wake event in groups, asking
// opts.alive first: nextCheck asks only every livenessPoll, and a waiter no
// longer wanted would claim mail no one sees. A group whose claim fails is
// passed over, to be tried again at the next check: one read-only or full
// file, or one deleted or left meanwhile, must not end the wait for the rest.
func claimFirstWakeup(st *store, opts waitOptions, groups []membership) *wakeNotice {
	for _, g := range groups {
		if g.wakeups == 0 {
			continue
		}
		if opts.alive != nil && !opts.alive() {
			return nil
		}
		var n *wakeNotice
		err := retryBusy(func() (err error) {
			n, err = st.claimWaitWakeup(g, opts.contextID, st.now().Add(-opts.grace), waitNoticeMaxBytes)
			return err
		})
		if err == nil && n != nil {
			return n
		}
	}
	return nil
}

// waitNoticeMaxBytes bounds the message text in a wake notice; the agent
// reads the whole message with get_unread_messages.
const waitNoticeMaxBytes = 2 << 10

// formatWakeNotice is what `wait` prints on stderr for the agent, the text
// indented as a hook's, so that it cannot pass for the notice's last line.
func formatWakeNotice(contextID string, n *wakeNotice) string {
	text, read := n.text, "It is now marked read; get_unread_messages returns any other new messages"
	if n.cut {
		text = truncateUTF8(text, waitNoticeMaxBytes) + " [...]"
		read = "It is cut short here and stays unread: read it whole with get_unread_messages"
	}
	return fmt.Sprintf("Crosstalk: %s wrote in group %s (message %d, priority %s, wakes you: %s):\n  %s\n"+
		"%s (group_id %s, context_id %s). Reply if needed.",
		shortLabel(n.sender), describeGroup(n.groupID, n.groupName), n.messageID, n.priority, n.relevance, hookIndent.Replace(text), read, n.groupID, contextID)
}

// waitGrace is how old a wake event must be before a waiter claims it: a
// session's wait_for_messages or hook gets fresh mail within 100 ms even
// under load, so half a second lets those paths win the race.
const waitGrace = 500 * time.Millisecond

// clientPID is the agent client's process: CLAUDE_PID, which Claude Code
// sets for its hooks, else the parent.
func clientPID() int {
	if pid, err := strconv.Atoi(os.Getenv("CLAUDE_PID")); err == nil && pid > 0 {
		return pid
	}
	return os.Getppid()
}

// foregroundArgs reports whether Claude Code's command line args, with the
// hook's environment getenv, is a headless run without streaming input,
// which waits for its asyncRewake hooks in the foreground: a waiter would
// hang it. Headless is -p, --print or, as `claude "task" > out`, unattended.
func foregroundArgs(args []string, getenv func(string) string) bool {
	// Claude Code says unattended for any run but an interactive one, and for its background sessions, which have a terminal.
	printMode := getenv("CLAUDE_CODE_SESSION_ATTENDED") == "0" && getenv("CLAUDE_CODE_SESSION_KIND") == ""
	i := slices.Index(args, "--input-format")
	streaming := slices.Contains(args, "--input-format=stream-json") || i >= 0 && i+1 < len(args) && args[i+1] == "stream-json"
	return (printMode || slices.Contains(args, "-p") || slices.Contains(args, "--print")) && !streaming
}

// processArgs is the command line of process pid, from /proc where there is
// one and from ps elsewhere; empty when neither can tell.
func processArgs(pid int) []string {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	}
	out, _ := exec.Command("ps", "-ww", "-o", "args=", "-p", strconv.Itoa(pid)).Output()
	return strings.Fields(string(out))
}

// waiterSlot is the file naming a session's one waiter, in the groups
// directory's waiters subdirectory, which no group scan reads.
func waiterSlot(dir, contextID string) string {
	sum := sha256.Sum256([]byte(contextID))
	return filepath.Join(dir, "waiters", hex.EncodeToString(sum[:16]))
}

// takeWaiterSlot makes this process the session's waiter by writing its
// pid in the slot file at path; the waiter it replaces sees that within
// livenessPoll and exits, so waiters re-armed at every Stop never pile up.
// release removes the file if still ours.
func takeWaiterSlot(path string) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("waiter slot: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("waiter slot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("waiter slot: %w", err)
	}
	return func() {
		if ownsWaiterSlot(path) {
			os.Remove(path)
		}
	}, nil
}

// clientEndReach is how long the end of a client's stdio server still ends
// the client's waiters that start after it: Claude Code may start a Stop
// hook's waiter as it closes its servers, a client reusing the pid later.
const clientEndReach = 10 * time.Second

// endClientWaiters ends the waiters of client process pid with a marker
// file that clientEnded reads, removing those older than clientEndReach. The
// stdio server calls it as it stops, the one sign a waiter of a headless
// Claude Code run gets that its session ends (the client waits 30 s for it).
func endClientWaiters(dir string, pid int) {
	ended := filepath.Dir(clientEndMarker(dir, pid))
	os.MkdirAll(ended, 0o700)
	os.WriteFile(clientEndMarker(dir, pid), []byte("ended"), 0o600) // a rewrite renews its time
	markers, _ := os.ReadDir(ended)                                 // not a glob: the path may hold [, * or ?
	for _, e := range markers {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) >= clientEndReach {
			os.Remove(filepath.Join(ended, e.Name()))
		}
	}
}

// clientEndMarker is the file by which endClientWaiters ends client pid's
// waiters; a stdio server that starts removes its client's, as a client
// reconnecting its server is not ending.
func clientEndMarker(dir string, pid int) string {
	return filepath.Join(dir, "waiters", "ended", strconv.Itoa(pid))
}

// clientEnded reports whether client process pid's stdio server ended
// within clientEndReach, or the process is gone; Windows has no signal 0,
// where a process found is taken as running.
func clientEnded(dir string, pid int) bool {
	info, err := os.Stat(clientEndMarker(dir, pid))
	if err == nil && time.Since(info.ModTime()) < clientEndReach {
		return true
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	defer p.Release()
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// ownsWaiterSlot reports whether the slot file still names this process.
func ownsWaiterSlot(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && string(b) == strconv.Itoa(os.Getpid())
}

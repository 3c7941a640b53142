package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// hookRequest is one `crosstalk-mcp hook` run: the client's event and the
// member it speaks for.
type hookRequest struct {
	eventName string
	event     hookEvent
	contextID string
}

// errNoIdentity is why a hook or wait prints nothing when it cannot tell
// which member it speaks for: another member's mail would be worse than none.
var errNoIdentity = errors.New("cannot tell which member this session is")

const hookHelp = `usage: crosstalk-mcp hook --client NAME [--event EVENT] [--context-id ID] [--groups-dir PATH]

Answer one agent client hook with the member's new mail, in the client's own
output shape, reading the hook payload on stdin. Like any other failure, a
usage error exits 0 with one line on stderr: a hook never breaks its client.

options:
  --client NAME       antigravity, claude-code, codex, cursor, vscode, or
                      gemini: retired (Gemini CLI, use antigravity)
  --event EVENT       the hook event (default: the payload's event name)
  --context-id ID     the member, when the payload has no session id (default:
                      $CROSSTALK_CONTEXT_ID)
  --groups-dir PATH   the server's groups directory (default:
                      $CROSSTALK_GROUPS_DIR, else ~/.cache/crosstalk)
`

// runHook answers one client hook, as hookHelp describes, and marks what it
// printed read once written out whole; a closed stdout leaves it unread.
func runHook(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	signal.Ignore(syscall.SIGPIPE)
	fail := func(err error) int {
		fmt.Fprintf(stderr, "crosstalk-mcp hook: %v\n", err)
		return 0
	}
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	client := fs.String("client", "", "")
	event := fs.String("event", "", "")
	contextID := fs.String("context-id", "", "")
	groupsDir := fs.String("groups-dir", "", "")
	if err := parseFlags(fs, args); err != nil {
		commandExit("hook", hookHelp, err, stdout, stderr)
		return 0
	}
	req, err := parseHookRequest(*client, *event, *contextID, stdin)
	if err != nil {
		return fail(err)
	}
	if req == nil {
		return 0 // an event this client's hooks have nothing to say at
	}
	st, err := openCommandStore("hook", *groupsDir, stderr)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	answer, err := answerHook(st, req)
	if err != nil {
		return fail(err)
	}
	if answer.text == "" {
		return 0
	}
	if _, err := io.WriteString(stdout, answer.text); err != nil {
		return fail(fmt.Errorf("write answer: %w; the mail stays unread", errors.Join(err, answer.release(st, req.contextID))))
	}
	if err := deliverItems(st, req.contextID, answer.items); err != nil {
		return fail(fmt.Errorf("mark the printed mail read: %w", err))
	}
	return 0
}

// openCommandStore opens the store of a one-shot command on dir, else
// groupsDirFromEnv's, logging under the command's name. It never creates
// the directory: a mistyped one must be reported, not answered from empty,
// and so must one this user cannot list, whose groups it would not see.
func openCommandStore(command, dir string, stderr io.Writer) (*store, error) {
	if dir == "" {
		var err error
		if dir, err = groupsDirFromEnv(); err != nil {
			return nil, err
		}
	}
	if err := groupsDirReadable(dir); err != nil {
		return nil, err
	}
	st, err := newStore(dir, time.Now)
	if err != nil {
		return nil, err
	}
	log.SetOutput(stderr)
	log.SetFlags(0)
	log.SetPrefix("crosstalk-mcp " + command + ": ")
	return st, nil
}

// groupsDirReadable returns nil when dir can be listed, else an error that
// names the settings that point a command at the server's directory.
func groupsDirReadable(dir string) error {
	if _, err := os.ReadDir(dir); err != nil {
		return fmt.Errorf("no readable groups directory (%w): point CROSSTALK_GROUPS_DIR or --groups-dir at the server's", err)
	}
	return nil
}

// parseHookRequest reads the payload for the command line's client, event
// and context id; nil, nil is an event of the client not used here, or one
// fired inside a subagent.
func parseHookRequest(client, event, contextID string, stdin io.Reader) (*hookRequest, error) {
	c, err := hookClientNamed(client)
	if err != nil {
		return nil, err
	}
	// One JSON value, read up to its end: a client may leave stdin open.
	payload := hookPayload{}
	if err := json.NewDecoder(stdin).Decode(&payload); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s payload: %w", client, err)
	}
	// VS Code runs Claude Code's hooks too, sending camelCase fields, and
	// reads only its own answers: output the model never sees marks nothing read.
	if _, vscode := payload["hookEventName"]; vscode && client == "claude-code" {
		c = hookClients["vscode"]
	}
	name := cmp.Or(event, payload.str(c.eventKeys...))
	if name == "" {
		return nil, fmt.Errorf("no --event and no event name in the %s payload; printing nothing", client)
	}
	ev, ok := c.events[name]
	// A hook inside a subagent carries its parent's session id and an
	// agent_id: what it prints reaches the subagent's model, not the member's.
	if !ok || (ev.kind != eventStop && payload.str("agent_id") != "") {
		return nil, nil
	}
	var calls float64
	if raw, ok := payload[c.firstCall]; ok && json.Unmarshal(raw, &calls) == nil && calls == 0 {
		ev.kind = eventStart
	}
	id := resolveContextID(payload.str(c.sessionKeys...), contextID)
	if id == "" {
		return nil, fmt.Errorf("%w: no %s in the %s payload, no --context-id and no CROSSTALK_CONTEXT_ID; printing nothing",
			errNoIdentity, strings.Join(c.sessionKeys, " or "), client)
	}
	return &hookRequest{eventName: name, event: ev, contextID: id}, nil
}

// resolveContextID picks the member's context_id: the client's own session
// id, so that nothing needs configuring, then --context-id, then
// CROSSTALK_CONTEXT_ID.
func resolveContextID(fromPayload, fromFlag string) string {
	for _, id := range []string{fromPayload, fromFlag, os.Getenv("CROSSTALK_CONTEXT_ID")} {
		if !isBlank(id) {
			return id
		}
	}
	return ""
}

// hookAnswer is one hook run's text and what it claimed to print it: the
// mail it shows, or the wake events a Stop notice tells of.
type hookAnswer struct {
	text  string
	items []hookItem
	wakes map[string][]int64 // message ids by group
}

// answerHook answers one hook run, showing only mail it claimed
// (claimForHook), so no message reaches the session twice. A Stop prints
// only when it acknowledged a pending wake event, so the next Stop lets the
// agent stop: one continuation per batch, never a loop.
func answerHook(st *store, req *hookRequest) (hookAnswer, error) {
	groups, err := st.memberships(req.contextID)
	if err != nil {
		return hookAnswer{}, err
	}
	if req.event.kind == eventStop {
		text, wakes, err := stopNotice(st, req.contextID, groups)
		if err != nil || text == "" { // give back what a failure acknowledged
			return hookAnswer{}, errors.Join(err, hookAnswer{wakes: wakes}.release(st, req.contextID))
		}
		return hookAnswer{text: req.event.render(req.eventName, text), wakes: wakes}, nil
	}
	var text string
	if req.event.kind == eventStart {
		text = formatIdentity(req.contextID, groups)
	}
	items, rest, err := claimPending(st, req.contextID, groups, hookMaxBytes-len(text))
	if err != nil {
		return hookAnswer{}, err
	}
	if len(items) > 0 {
		text = strings.TrimPrefix(text+"\n\n"+formatMail(req.contextID, items, rest), "\n\n")
	}
	if text == "" {
		return hookAnswer{}, nil
	}
	return hookAnswer{text: req.event.render(req.eventName, text), items: items}, nil
}

// release gives back what the answer claimed when it could not be written
// out, so that the next hook, waiter or Stop tells of it again.
func (a hookAnswer) release(st *store, contextID string) error {
	var err error
	for _, p := range a.items {
		err = errors.Join(err, retryBusy(func() error { return st.releaseClaim(p.groupID, contextID, viaHook, []int64{p.msg.id}) }))
	}
	for id, ids := range a.wakes {
		err = errors.Join(err, retryBusy(func() error { return st.releaseStopWakeups(id, contextID, ids) }))
	}
	return err
}

// stopNotice acknowledges the member's pending wake events and says who
// wrote where, without the text: Claude Code shows a Stop block's reason to
// the model twice, so the text comes once, through get_unread_messages. It
// returns the acknowledged events' message ids by group.
func stopNotice(st *store, contextID string, groups []membership) (string, map[string][]int64, error) {
	var b strings.Builder
	acked := map[string][]int64{}
	for _, g := range groups {
		if g.wakeups == 0 {
			continue
		}
		var wakes []wakeNotice
		if err := retryBusy(func() (err error) { wakes, err = st.claimStopWakeups(g.groupID, contextID); return err }); err != nil {
			return "", acked, err
		}
		if len(wakes) == 0 {
			continue
		}
		var senders []string
		for _, w := range wakes {
			acked[g.groupID] = append(acked[g.groupID], w.messageID)
			if name := shortLabel(w.sender); !slices.Contains(senders, name) {
				senders = append(senders, name)
			}
		}
		fmt.Fprintf(&b, "\n- %d message(s) from %s in group %s (wakes you: %s): call get_unread_messages with group_id %s and context_id %s",
			len(wakes), strings.Join(senders, ", "), describeGroup(g.groupID, g.groupName), wakes[0].relevance, g.groupID, contextID)
	}
	if b.Len() == 0 {
		return "", nil, nil
	}
	return "Crosstalk: new mail before you stop. Read it with get_unread_messages, then reply if needed:" + b.String(), acked, nil
}

// claimPending reads the member's unread mail in every group, picks what a
// hook prints in budget bytes (selectForHook) and keeps what claimForHook
// claims for it; rest counts the messages the pick left out.
func claimPending(st *store, contextID string, groups []membership, budget int) (items []hookItem, rest int, err error) {
	var pending []pendingMessage
	total := 0
	for _, g := range groups {
		if g.unread == 0 {
			continue
		}
		p, n, err := st.pendingMail(g, contextID, hookMaxMessages+1) // selectForHook walks no further
		if err != nil {
			return nil, 0, err
		}
		pending, total = append(pending, p...), total+n
	}
	items, rest = selectForHook(pending, budget)
	rest += total - len(pending) // those pendingMail left unread
	byGroup := map[string][]int64{}
	for _, p := range items {
		byGroup[p.groupID] = append(byGroup[p.groupID], p.msg.id)
	}
	claimed := map[string]map[int64]bool{}
	for _, id := range slices.Sorted(maps.Keys(byGroup)) { // in order, as memberships are
		if err = retryBusy(func() (err error) {
			claimed[id], err = st.claimForHook(id, contextID, byGroup[id])
			return err
		}); err != nil {
			delete(claimed, id) // rolled back
			break
		}
	}
	items = slices.DeleteFunc(items, func(p hookItem) bool { return !claimed[p.groupID][p.msg.id] })
	if err != nil { // give back the other groups' claims
		return nil, 0, errors.Join(err, hookAnswer{items: items}.release(st, contextID))
	}
	return items, rest, nil
}

// deliverItems records what a hook or waiter printed: read when shown
// whole, unread when cut short. It runs after the answer is written, so
// mail is never marked read unseen; a racing tool call may see it twice.
func deliverItems(st *store, contextID string, items []hookItem) error {
	type groupIDs struct{ read, previewed []int64 }
	byGroup := map[string]groupIDs{}
	for _, p := range items {
		g := byGroup[p.groupID]
		if p.preview {
			g.previewed = append(g.previewed, p.msg.id)
		} else {
			g.read = append(g.read, p.msg.id)
		}
		byGroup[p.groupID] = g
	}
	for id, g := range byGroup {
		if err := retryBusy(func() error { return st.deliverMessages(id, contextID, g.read, g.previewed) }); err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// hookRequest is one `crosstalk-mcp hook` run: which client and event, the
// payload the client wrote on stdin, and the member it speaks for.
type hookRequest struct {
	client    *hookClient
	eventName string
	event     hookEvent
	payload   hookPayload
	contextID string
}

// errNoIdentity is why a hook or wait prints nothing when it cannot tell
// which member it speaks for: printing another member's mail would be worse
// than printing none.
var errNoIdentity = errors.New("cannot tell which member this session is")

const hookHelp = `usage: crosstalk-mcp hook --client NAME [--event EVENT] [--context-id ID] [--groups-dir PATH]

Answer one agent client hook with the member's new mail, in the client's own
output shape, reading the hook payload on stdin. Like any other failure, a
usage error exits 0 with one line on stderr: a hook never breaks its client.

options:
  --client NAME       claude-code, codex, gemini, vscode or cursor
  --event EVENT       the hook event (default: the payload's event name)
  --context-id ID     the member, when the payload has no session id (default:
                      $CROSSTALK_CONTEXT_ID)
  --groups-dir PATH   the server's groups directory (default:
                      $CROSSTALK_GROUPS_DIR, else ~/.cache/crosstalk)
`

// runHook answers one client hook: it prints the member's pending mail in
// the client's documented output shape for the event and, once that is
// written out whole, marks what it printed read. A hook must never break
// the client, so every failure exits 0 with nothing on stdout and one line
// on stderr, a usage error included; a closed stdout is a write error, not
// a SIGPIPE death, and leaves the mail unread.
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
	out, items, err := answerHook(st, req)
	if err != nil {
		return fail(err)
	}
	if out == "" {
		return 0
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		return fail(fmt.Errorf("write answer: %w; the mail stays unread", err))
	}
	if err := deliverItems(st, req.contextID, items); err != nil {
		return fail(fmt.Errorf("mark the printed mail read: %w", err))
	}
	return 0
}

// openCommandStore opens the groups store of a one-shot command (hook,
// wait, status) on dir, or groupsDirFromEnv's directory when dir is empty,
// and sends the store's warnings (a damaged group file skipped) to the
// command's stderr under its name. It never creates the directory: a hook
// pointed at a mistyped one must say so, not answer from a new empty one.
func openCommandStore(command, dir string, stderr io.Writer) (*store, error) {
	if dir == "" {
		var err error
		if dir, err = groupsDirFromEnv(); err != nil {
			return nil, err
		}
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("no groups directory %s: point CROSSTALK_GROUPS_DIR or --groups-dir at the server's", dir)
	}
	st, err := newStore(dir)
	if err != nil {
		return nil, err
	}
	log.SetOutput(stderr)
	log.SetFlags(0)
	log.SetPrefix("crosstalk-mcp " + command + ": ")
	return st, nil
}

// parseHookRequest reads the payload for the command line's client, event
// and context id. It returns nil without error for an event the client has
// but that is not used here.
func parseHookRequest(client, event, contextID string, stdin io.Reader) (*hookRequest, error) {
	c, err := hookClientNamed(client)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(stdin)
	if err != nil {
		return nil, fmt.Errorf("read %s payload: %w", c.name, err)
	}
	payload := hookPayload{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &payload); err != nil {
			return nil, fmt.Errorf("read %s payload: %w", c.name, err)
		}
	}
	name := event
	if name == "" {
		name = payload.str(c.eventKeys...)
	}
	ev, ok := c.events[name]
	if !ok {
		return nil, nil
	}
	id := resolveContextID(payload.str(c.sessionKeys...), contextID)
	if id == "" {
		return nil, fmt.Errorf("%w: no %s in the %s payload, no --context-id and no CROSSTALK_CONTEXT_ID; printing nothing",
			errNoIdentity, strings.Join(c.sessionKeys, " or "), c.name)
	}
	return &hookRequest{client: c, eventName: name, event: ev, payload: payload, contextID: id}, nil
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

// answerHook works out the text for one hook run and the mail it shows,
// which runHook delivers once the text is written out. A Stop event prints
// only when a wake event is pending and shown, and delivering that mail
// acknowledges it, so the next Stop finds nothing and lets the agent stop:
// one continuation per batch of mail, never a loop.
func answerHook(st *store, req *hookRequest) (string, []hookItem, error) {
	groups, err := st.memberships(req.contextID)
	if err != nil {
		return "", nil, err
	}
	var text string
	if req.event.kind == eventStart {
		text = formatIdentity(req.contextID, groups)
	}
	var unread, wakes int64
	for _, g := range groups {
		unread += g.unread
		wakes += g.wakeups
	}
	if req.event.kind == eventStop && wakes == 0 {
		return "", nil, nil
	}
	var items []hookItem
	if unread > 0 {
		var rest int
		if items, rest, err = pickPending(st, req.contextID, groups); err != nil {
			return "", nil, err
		}
		if req.event.kind == eventStop && !slices.ContainsFunc(items, func(p hookItem) bool { return p.wakes }) {
			return "", nil, nil
		}
		if len(items) > 0 {
			text = strings.TrimPrefix(text+"\n\n"+formatMail(req.contextID, items, rest), "\n\n")
		}
	}
	if text == "" {
		return "", nil, nil
	}
	return req.event.render(req.eventName, text), items, nil
}

// pickPending reads the member's unread mail in every group and picks what
// a hook prints (selectForHook).
func pickPending(st *store, contextID string, groups []membership) ([]hookItem, int, error) {
	var pending []pendingMessage
	for _, g := range groups {
		if g.unread == 0 {
			continue
		}
		p, err := st.pendingMail(g, contextID)
		if err != nil {
			return nil, 0, err
		}
		pending = append(pending, p...)
	}
	items, rest := selectForHook(pending)
	return items, rest, nil
}

// deliverItems records the printed mail delivered by hook: read when shown
// whole, acknowledged but still unread when cut short. It runs after the
// answer is written, so that mail is never marked read unseen; a reader
// racing it may then see a message twice, which beats never.
func deliverItems(st *store, contextID string, items []hookItem) error {
	type groupIDs struct{ read, previewed []int64 }
	byGroup := map[string]*groupIDs{}
	for _, p := range items {
		g := byGroup[p.groupID]
		if g == nil {
			g = &groupIDs{}
			byGroup[p.groupID] = g
		}
		if p.preview {
			g.previewed = append(g.previewed, p.msg.id)
		} else {
			g.read = append(g.read, p.msg.id)
		}
	}
	for id, g := range byGroup {
		if err := retryBusy(func() error { return st.deliverMessages(id, contextID, viaHook, g.read, g.previewed) }); err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
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

const hookHelp = `usage: crosstalk-mcp hook --client NAME [--event EVENT] [--context-id ID]

Answer one agent client hook with the member's new mail, in the client's own
output shape, reading the hook payload on stdin. Like any other failure, a
usage error exits 0 with one line on stderr: a hook never breaks its client.

options:
  --client NAME     claude-code, codex, gemini, vscode or cursor
  --event EVENT     the hook event (default: the payload's event name)
  --context-id ID   the member, when the payload has no session id (default:
                    $CROSSTALK_CONTEXT_ID)
`

// runHook answers one client hook: it prints the member's pending mail in
// the client's documented output shape for the event and marks what it
// printed read. A hook must never break the client, so every failure exits
// 0 with nothing on stdout and one line on stderr, a usage error included.
func runHook(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "crosstalk-mcp hook: %v\n", err)
		return 0
	}
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	client := fs.String("client", "", "")
	event := fs.String("event", "", "")
	contextID := fs.String("context-id", "", "")
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
	st, _, err := openGroupsStore()
	if err != nil {
		return fail(err)
	}
	defer st.close()
	out, err := answerHook(st, req)
	if err != nil {
		return fail(err)
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		return fail(fmt.Errorf("write answer: %w", err))
	}
	return 0
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

// answerHook works out the text for one hook run and delivers the mail it
// prints. A Stop event prints only when a wake event is pending, and then
// delivers (reads) that mail, so the next Stop finds nothing and lets the
// agent stop: one continuation per batch of mail, never a loop.
func answerHook(st *store, req *hookRequest) (string, error) {
	groups, err := st.memberships(req.contextID)
	if err != nil {
		return "", err
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
		return "", nil
	}
	if unread > 0 {
		mail, woke, err := deliverPending(st, req.contextID, groups)
		if err != nil {
			return "", err
		}
		if req.event.kind == eventStop && !woke {
			return "", nil
		}
		if mail != "" {
			text = strings.TrimPrefix(text+"\n\n"+mail, "\n\n")
		}
	}
	if text == "" {
		return "", nil
	}
	return req.event.render(req.eventName, text), nil
}

// deliverPending reads the member's unread mail in every group, picks what a
// hook prints and marks exactly that read. woke reports whether a printed
// message carried a wake event.
func deliverPending(st *store, contextID string, groups []membership) (text string, woke bool, err error) {
	var pending []pendingMessage
	for _, g := range groups {
		if g.unread == 0 {
			continue
		}
		p, err := st.pendingMail(g, contextID)
		if err != nil {
			return "", false, err
		}
		pending = append(pending, p...)
	}
	picked, rest := selectForHook(pending)
	byGroup := map[string][]int64{}
	for _, p := range picked {
		byGroup[p.groupID] = append(byGroup[p.groupID], p.msg.id)
	}
	delivered := map[string]map[int64]bool{}
	for id, ids := range byGroup {
		var confirmed []int64
		err := retryBusy(func() (err error) {
			confirmed, err = st.deliverMessages(id, contextID, viaHook, ids)
			return err
		})
		if err != nil {
			return "", false, err
		}
		delivered[id] = map[int64]bool{}
		for _, m := range confirmed {
			delivered[id][m] = true
		}
	}
	var shown []pendingMessage
	for _, p := range picked {
		if delivered[p.groupID][p.msg.id] {
			shown = append(shown, p)
			woke = woke || p.wakes
		}
	}
	if len(shown) == 0 {
		return "", false, nil
	}
	return formatMail(contextID, shown, rest), woke, nil
}

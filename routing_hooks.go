package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// hookClient is one agent client whose hooks `crosstalk-mcp hook` answers:
// where its payloads carry the session id and the event name, and what each
// of its events may print. Every shape here follows the client's own hook
// documentation; testdata/hooks/ holds a sample payload per client and event
// with the page it came from.
type hookClient struct {
	name string
	// sessionKeys name the payload fields holding the client's own
	// session or thread id, which is the member's context_id.
	sessionKeys []string
	eventKeys   []string
	events      map[string]hookEvent
}

// hookEventKind says what an event may be used for.
type hookEventKind int

const (
	// eventStart tells the model its context_id and groups, plus any mail.
	eventStart hookEventKind = iota
	// eventContext adds pending mail to the model's context, or nothing.
	eventContext
	// eventStop keeps the agent going when a wake event is pending.
	eventStop
)

// hookEvent is one event of a client and how text is printed for it.
type hookEvent struct {
	kind   hookEventKind
	render func(event, text string) string
}

// claudeContext is Claude Code's hookSpecificOutput.additionalContext
// answer, which VS Code and Codex also read for the same event names.
func claudeContext(event, text string) string {
	return jsonLine(map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": event, "additionalContext": text}})
}

// blockStop is the {"decision": "block", "reason": ...} answer with which
// Claude Code, Codex and VS Code keep an agent from stopping; reason is
// what the model is told.
func blockStop(_, text string) string {
	return jsonLine(map[string]any{"decision": "block", "reason": text})
}

// plainText is stdout as it is: Codex adds a SessionStart or
// UserPromptSubmit hook's plain stdout to the model's context.
func plainText(_, text string) string { return text + "\n" }

// geminiContext is Gemini CLI's hookSpecificOutput.additionalContext.
// Gemini parses stdout as JSON only, so no plain text may go there.
func geminiContext(_, text string) string {
	return jsonLine(map[string]any{"hookSpecificOutput": map[string]any{"additionalContext": text}})
}

// geminiRetry is AfterAgent's "deny": the reason goes to the agent as a
// new prompt, which is how Gemini CLI keeps an agent going.
func geminiRetry(_, text string) string {
	return jsonLine(map[string]any{"decision": "deny", "reason": text})
}

// hookClients are the clients `hook --client` accepts.
var hookClients = map[string]*hookClient{
	"claude-code": {name: "claude-code", sessionKeys: []string{"session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart":     {eventStart, claudeContext},
			"UserPromptSubmit": {eventContext, claudeContext},
			"PostToolUse":      {eventContext, claudeContext},
			"Stop":             {eventStop, blockStop},
			"SubagentStop":     {eventStop, blockStop},
		}},
	"codex": {name: "codex", sessionKeys: []string{"session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart":     {eventStart, plainText},
			"UserPromptSubmit": {eventContext, plainText},
			"PostToolUse":      {eventContext, claudeContext},
			"Stop":             {eventStop, blockStop},
		}},
	"gemini": {name: "gemini", sessionKeys: []string{"session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart": {eventStart, geminiContext},
			"BeforeAgent":  {eventContext, geminiContext},
			"AfterTool":    {eventContext, geminiContext},
			"AfterAgent":   {eventStop, geminiRetry},
		}},
	"vscode": {name: "vscode", sessionKeys: []string{"sessionId", "session_id"}, eventKeys: []string{"hookEventName", "hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart":     {eventStart, claudeContext},
			"UserPromptSubmit": {eventContext, claudeContext},
			"PostToolUse":      {eventContext, claudeContext},
			"Stop":             {eventStop, blockStop},
		}},
	"cursor": {name: "cursor", sessionKeys: []string{"conversation_id", "session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"sessionStart": {eventStart, func(_, text string) string { return jsonLine(map[string]any{"additional_context": text}) }},
			"stop":         {eventStop, func(_, text string) string { return jsonLine(map[string]any{"followup_message": text}) }},
		}},
}

// hookClientNames lists the accepted --client values in order.
func hookClientNames() []string {
	names := make([]string, 0, len(hookClients))
	for n := range hookClients {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// hookClientNamed returns the client a --client value names, or the error
// `hook` and `wait` both give for any other value.
func hookClientNamed(name string) (*hookClient, error) {
	c := hookClients[name]
	if c == nil {
		return nil, fmt.Errorf("--client must be one of %s, not %q", strings.Join(hookClientNames(), ", "), name)
	}
	return c, nil
}

// jsonLine renders v as one line of JSON. HTML escaping is off: the text is
// read by a model, and "<" should stay "<".
func jsonLine(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return b.String()
}

// hookPayload is a decoded hook input.
type hookPayload map[string]json.RawMessage

// str returns the first of keys that holds a non-blank JSON string.
func (p hookPayload) str(keys ...string) string {
	for _, k := range keys {
		var v string
		if raw, ok := p[k]; ok && json.Unmarshal(raw, &v) == nil && !isBlank(v) {
			return v
		}
	}
	return ""
}

// jsonObject decodes raw into p when it holds a JSON object.
func jsonObject(raw []byte, p *hookPayload) bool {
	return json.Unmarshal(raw, p) == nil && *p != nil
}

// Output bounds: a hook's answer lands in the model's context on every
// turn, so it stays small; the rest waits for get_unread_messages.
const (
	hookMaxMessages = 20
	hookMaxBytes    = 8 << 10
)

// selectForHook orders pending mail for printing, messages with a pending
// wake event first and then the other unread ones, each oldest first, and
// keeps what fits in hookMaxMessages and hookMaxBytes. rest counts the
// messages left for get_unread_messages.
func selectForHook(pending []pendingMessage) (picked []pendingMessage, rest int) {
	sorted := append([]pendingMessage(nil), pending...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].wakes != sorted[j].wakes {
			return sorted[i].wakes
		}
		return sorted[i].msg.sentAt < sorted[j].msg.sentAt
	})
	size := 0
	for i, p := range sorted {
		n := len(formatHookMessage(p))
		if len(picked) == hookMaxMessages || size+n > hookMaxBytes {
			return picked, len(sorted) - i
		}
		picked, size = append(picked, p), size+n
	}
	return picked, 0
}

// formatHookMessage is one message as the agent reads it in a hook answer.
// It carries the group id and message id, which the tools take.
func formatHookMessage(p pendingMessage) string {
	var b strings.Builder
	group := p.groupID
	if p.groupName != "" {
		group = fmt.Sprintf("%q (%s)", p.groupName, p.groupID)
	}
	fmt.Fprintf(&b, "- message %d in group %s from %s (context_id %s) at %s", p.msg.id, group, p.msg.name, p.msg.contextID, p.msg.sentAt)
	if p.msg.priority != "normal" {
		fmt.Fprintf(&b, ", priority %s", p.msg.priority)
	}
	if p.wakes {
		fmt.Fprintf(&b, ", wakes you (%s)", p.relevance)
	}
	b.WriteString(":\n")
	for _, line := range strings.Split(p.msg.text, "\n") {
		b.WriteString("  ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// formatMail is the text of a batch of delivered messages.
func formatMail(contextID string, msgs []pendingMessage, rest int) string {
	var b strings.Builder
	noun := "messages"
	if len(msgs) == 1 {
		noun = "message"
	}
	fmt.Fprintf(&b, "Crosstalk: %d new %s for context_id %s (now marked read):\n", len(msgs), noun, contextID)
	for _, p := range msgs {
		b.WriteString(formatHookMessage(p))
	}
	if rest > 0 {
		fmt.Fprintf(&b, "%d more: call get_unread_messages.\n", rest)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// formatIdentity tells the model at session start who it is in Crosstalk:
// the context_id to pass verbatim and the groups it has joined.
func formatIdentity(contextID string, groups []membership) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Crosstalk: your context_id is %s. Pass it verbatim as context_id in every Crosstalk tool call (join_group, send_message, get_unread_messages...), so that new messages reach you at your next turn.", contextID)
	if len(groups) == 0 {
		b.WriteString(" You have not joined any Crosstalk group yet.")
		return b.String()
	}
	b.WriteString(" Your groups:")
	for _, g := range groups {
		name := g.groupName
		if name == "" {
			name = "(unnamed)"
		}
		fmt.Fprintf(&b, "\n- %s %s as %q: %d unread", g.groupID, name, g.name, g.unread)
	}
	return b.String()
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

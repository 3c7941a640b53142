package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// hookClient is one agent client whose hooks `crosstalk-mcp hook` answers:
// where its payloads carry the session id and the event name, and what each
// of its events may print, as testdata/hooks/ documents per client.
type hookClient struct {
	// sessionKeys name the payload fields holding the member's context_id.
	sessionKeys []string
	eventKeys   []string
	// firstCall names the payload's count of model calls, whose first is
	// answered as a session start for a client with no such event.
	firstCall string
	events    map[string]hookEvent
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
// answer, which VS Code and Codex also read.
func claudeContext(event, text string) string {
	return jsonLine(map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": event, "additionalContext": text}})
}

// blockStop is the answer with which Claude Code and Codex keep an agent
// from stopping; reason is what the model is told.
func blockStop(_, text string) string {
	return jsonLine(map[string]any{"decision": "block", "reason": text})
}

// vscodeStop is VS Code's Stop answer, the same decision nested in
// hookSpecificOutput (microsoft/vscode-docs
// docs/agents/reference/hooks-reference.md, "Stop output").
func vscodeStop(event, text string) string {
	return jsonLine(map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": event, "decision": "block", "reason": text}})
}

// agyInject is Antigravity CLI's PreInvocation answer: an ephemeral
// message handed to the agent before the model call
// (antigravity.google/docs/hooks).
func agyInject(_, text string) string {
	return jsonLine(map[string]any{"injectSteps": []any{map[string]any{"ephemeralMessage": text}}})
}

// plainText is stdout as it is, which Codex adds to the model's context.
func plainText(_, text string) string { return text + "\n" }

// geminiContext is Gemini CLI's hookSpecificOutput.additionalContext;
// Gemini parses stdout as JSON only.
func geminiContext(_, text string) string {
	return jsonLine(map[string]any{"hookSpecificOutput": map[string]any{"additionalContext": text}})
}

// geminiRetry is AfterAgent's "deny", whose reason Gemini CLI gives the
// agent as a new prompt.
func geminiRetry(_, text string) string {
	return jsonLine(map[string]any{"decision": "deny", "reason": text})
}

// hookClients are the clients `hook --client` accepts.
var hookClients = map[string]*hookClient{
	// Claude Code's hooks also run under VS Code, which sends camelCase and
	// is answered as "vscode" (parseHookRequest).
	"claude-code": {sessionKeys: []string{"session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart":     {eventStart, claudeContext},
			"UserPromptSubmit": {eventContext, claudeContext},
			"PostToolUse":      {eventContext, claudeContext},
			"Stop":             {eventStop, blockStop},
			"SubagentStop":     {eventStop, blockStop},
		}},
	"codex": {sessionKeys: []string{"session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart":     {eventStart, plainText},
			"UserPromptSubmit": {eventContext, plainText},
			"PostToolUse":      {eventContext, claudeContext},
			"Stop":             {eventStop, blockStop},
		}},
	"gemini": {sessionKeys: []string{"session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart": {eventStart, geminiContext},
			"BeforeAgent":  {eventContext, geminiContext},
			"AfterTool":    {eventContext, geminiContext},
			"AfterAgent":   {eventStop, geminiRetry},
		}},
	// VS Code's UserPromptSubmit takes the common output only, which never
	// reaches the model: mail printed there would be marked read unseen.
	"vscode": {sessionKeys: []string{"sessionId", "session_id"}, eventKeys: []string{"hookEventName", "hook_event_name"},
		events: map[string]hookEvent{
			"SessionStart": {eventStart, claudeContext},
			"PostToolUse":  {eventContext, claudeContext},
			"Stop":         {eventStop, vscodeStop},
		}},
	// Antigravity CLI sends no event name (hence --event in its hooks) and
	// no session start: PreInvocation runs before every model call.
	"antigravity": {sessionKeys: []string{"conversationId"}, firstCall: "invocationNum",
		events: map[string]hookEvent{"PreInvocation": {eventContext, agyInject}}},
	"cursor": {sessionKeys: []string{"conversation_id", "session_id"}, eventKeys: []string{"hook_event_name"},
		events: map[string]hookEvent{
			"sessionStart": {eventStart, func(_, text string) string { return jsonLine(map[string]any{"additional_context": text}) }},
			"stop":         {eventStop, func(_, text string) string { return jsonLine(map[string]any{"followup_message": text}) }},
		}},
}

// hookClientNames lists the accepted --client values in order.
func hookClientNames() []string { return slices.Sorted(maps.Keys(hookClients)) }

// hookClientNamed returns the client a --client value names, or the error
// `hook` and `wait` give for any other.
func hookClientNamed(name string) (*hookClient, error) {
	c := hookClients[name]
	if c == nil {
		return nil, fmt.Errorf("--client must be one of %s, not %q", strings.Join(hookClientNames(), ", "), name)
	}
	return c, nil
}

// jsonLine renders v as one line of JSON, unescaped for HTML since a model
// reads it.
func jsonLine(v any) string { return renderJSON(v, 0, "") + "\n" }

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

// Output bounds: a hook's answer lands in the model's context on every
// turn, so it stays small, its mail and any identity together within
// hookMaxBytes, well under the 10,000 characters past which Claude Code
// shows the model a 2 KB preview; hookPreviewBytes is how much of a message
// too big for it is shown.
const (
	hookMaxMessages  = 20
	hookMaxBytes     = 8 << 10
	hookPreviewBytes = 1 << 10
)

// hookItem is one message of a hook answer, shown whole or, when preview
// is set, only its first hookPreviewBytes.
type hookItem struct {
	pendingMessage
	preview bool
}

// selectForHook orders pending mail for printing, messages with a pending
// wake event first, each kind oldest first, and keeps what fits in
// hookMaxMessages and budget bytes; rest counts the messages left.
//
// A message that does not fit in what is left is shown as a preview when
// it alone is over the budget or nothing has been shown whole yet, and the
// walk goes on, so that one big message never hides the mail behind it;
// otherwise the walk stops there, keeping mail in order. A preview stays
// unread and only its wake event is acknowledged, so that Stop keeps the
// agent going once for it, not forever.
func selectForHook(pending []pendingMessage, budget int) (picked []hookItem, rest int) {
	sorted := append([]pendingMessage(nil), pending...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].wakes != sorted[j].wakes {
			return sorted[i].wakes
		}
		return sorted[i].msg.sentAt < sorted[j].msg.sentAt
	})
	size, whole := 0, 0
	for i, p := range sorted {
		item := hookItem{pendingMessage: p}
		n := len(formatHookMessage(item))
		if size+n > budget && (n > budget || whole == 0) {
			item.preview = true
			n = len(formatHookMessage(item))
		}
		if len(picked) == hookMaxMessages || size+n > budget {
			return picked, len(sorted) - i
		}
		if !item.preview {
			whole++
		}
		picked, size = append(picked, item), size+n
	}
	return picked, 0
}

// formatHookMessage is one message as the agent reads it in a hook answer,
// with the group and message ids the tools take.
func formatHookMessage(p hookItem) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- message %d in group %s from %s (context_id %s) at %s", p.msg.id, describeGroup(p.groupID, p.groupName), shortLabel(p.msg.name), shortLabel(p.msg.contextID), p.msg.sentAt)
	if p.msg.priority != "normal" {
		fmt.Fprintf(&b, ", priority %s", p.msg.priority)
	}
	if p.wakes {
		fmt.Fprintf(&b, ", wakes you (%s)", p.relevance)
	}
	b.WriteString(":\n")
	text := p.msg.text
	if p.preview {
		text = fmt.Sprintf("%s [...]\n[Only the first %d of its %d bytes are shown here, and it stays unread: "+
			"get_unread_messages with group_id %s returns it whole.]", truncateUTF8(text, hookPreviewBytes), hookPreviewBytes, len(text), p.groupID)
	}
	b.WriteString("  " + hookIndent.Replace(text) + "\n")
	return b.String()
}

// hookIndent indents every line of a message's text, at each line break a
// model may read as one, so that no text passes for a message header.
var hookIndent = strings.NewReplacer("\r\n", "\n  ", "\n", "\n  ", "\r", "\n  ", "\u0085", "\n  ", "\u2028", "\n  ", "\u2029", "\n  ")

// describeGroup names a group to the agent: its quoted name and its id, or
// the id alone when it has no name.
func describeGroup(id, name string) string {
	if name == "" {
		return id
	}
	return fmt.Sprintf("%q (%s)", shortLabel(name), id)
}

// shortLabel bounds a name a hook prints, which any member may make huge,
// and quotes one with a line break or another unprintable character, which
// could forge lines of the hook's text.
func shortLabel(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		s = strconv.Quote(s)
	}
	if len(s) <= 200 {
		return s
	}
	return truncateUTF8(s, 200) + "[...]"
}

// formatMail is the text of a batch of delivered messages.
func formatMail(contextID string, items []hookItem, rest int) string {
	noun, read := "messages", "now marked read"
	if len(items) == 1 {
		noun = "message"
	}
	var body strings.Builder
	for _, p := range items {
		body.WriteString(formatHookMessage(p))
		if p.preview {
			read = "now marked read, except those cut short"
		}
	}
	text := fmt.Sprintf("Crosstalk: %d new %s for context_id %s (%s):\n%s", len(items), noun, contextID, read, body.String())
	if rest > 0 {
		text += fmt.Sprintf("%d more: call get_unread_messages.\n", rest)
	}
	return strings.TrimSuffix(text, "\n")
}

// formatIdentity tells the model at session start its context_id and
// groups.
func formatIdentity(contextID string, groups []membership) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Crosstalk: your context_id is %s. Pass it verbatim as context_id in every Crosstalk tool call (join_group, send_message, get_unread_messages...), so that new messages reach you at your next turn.", contextID)
	if len(groups) == 0 {
		b.WriteString(" You have not joined any Crosstalk group yet.")
		return b.String()
	}
	b.WriteString(" Your groups:")
	for _, g := range groups {
		fmt.Fprintf(&b, "\n- %s %s as %q: %d unread", g.groupID, shortLabel(cmp.Or(g.groupName, "(unnamed)")), shortLabel(g.name), g.unread)
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

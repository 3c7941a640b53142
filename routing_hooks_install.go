package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// hookSettings is where and how one client keeps its hooks, for `hooks
// install` and `hooks uninstall`: the settings file per scope, the shape of
// an entry, and the entries Crosstalk needs.
type hookSettings struct {
	client string
	// user and project are the settings file below the home directory and
	// the project directory; "" means the scope is not supported.
	user, project string
	// grouped entries are Claude Code's {"hooks": [handler]} groups (also
	// Codex's and Gemini CLI's); otherwise an entry is the handler itself.
	grouped bool
	// cursor handlers are {"command": ...} only, in a file with "version": 1.
	cursor  bool
	entries []hookEntry
}

// hookEntry is one hook Crosstalk installs.
type hookEntry struct {
	event       string
	args        string // after the binary: "hook --client X" or "wait ..."
	timeout     int    // in the unit the client documents (s, or ms for Gemini)
	asyncRewake bool
}

func hookEntries(client string, timeout int, events ...string) []hookEntry {
	var out []hookEntry
	for _, ev := range events {
		out = append(out, hookEntry{event: ev, args: "hook --client " + client, timeout: timeout})
	}
	return out
}

// hookInstallTargets are the clients `hooks install` knows; the paths and
// shapes are those in testdata/hooks/README.md's documentation pages.
var hookInstallTargets = map[string]hookSettings{
	"claude-code": {client: "claude-code", user: ".claude/settings.json", project: ".claude/settings.json", grouped: true,
		entries: append(hookEntries("claude-code", 10, "SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"),
			// The background waiter that wakes an idle session (exit 2),
			// re-armed at every session start and every stop.
			hookEntry{event: "SessionStart", args: "wait --client claude-code --timeout 55m", timeout: 3600, asyncRewake: true},
			hookEntry{event: "Stop", args: "wait --client claude-code --timeout 55m", timeout: 3600, asyncRewake: true})},
	"codex": {client: "codex", user: ".codex/hooks.json", project: ".codex/hooks.json", grouped: true,
		entries: hookEntries("codex", 10, "SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")},
	"gemini": {client: "gemini", user: ".gemini/settings.json", project: ".gemini/settings.json", grouped: true,
		entries: hookEntries("gemini", 10000, "SessionStart", "BeforeAgent", "AfterTool", "AfterAgent")},
	"vscode": {client: "vscode", project: ".github/hooks/crosstalk.json",
		entries: hookEntries("vscode", 10, "SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")},
	"cursor": {client: "cursor", user: ".cursor/hooks.json", project: ".cursor/hooks.json", cursor: true,
		entries: hookEntries("cursor", 0, "sessionStart", "stop")},
}

// settingsPath resolves the settings file of a scope.
func (h hookSettings) settingsPath(scope, home, projectDir string) (string, error) {
	rel, base := h.user, home
	if scope == "project" {
		rel, base = h.project, projectDir
	} else if scope != "user" {
		return "", fmt.Errorf("--scope must be user or project, not %q", scope)
	}
	if rel == "" {
		return "", fmt.Errorf("%s hooks have no %s scope; VS Code also reads ~/.claude/settings.json, so use --client claude-code for every workspace", h.client, scope)
	}
	return filepath.Join(base, filepath.FromSlash(rel)), nil
}

// handler is the JSON of one hook handler.
func (h hookSettings) handler(e hookEntry, exe string) map[string]any {
	cmd := shellQuote(exe) + " " + e.args
	if h.cursor {
		return map[string]any{"command": cmd}
	}
	v := map[string]any{"type": "command", "command": cmd}
	if e.timeout > 0 {
		v["timeout"] = e.timeout
	}
	if e.asyncRewake {
		v["asyncRewake"] = true
	}
	return v
}

// entry is the JSON of one item of an event's array.
func (h hookSettings) entry(e hookEntry, exe string) any {
	if h.grouped {
		return map[string]any{"hooks": []any{h.handler(e, exe)}}
	}
	return h.handler(e, exe)
}

// shellQuote quotes a path for the shell the clients run hooks with when
// it holds anything but safe characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:\\") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isCrosstalkCommand reports whether a hook command is one of ours.
func (h hookSettings) isCrosstalkCommand(cmd string) bool {
	return strings.Contains(cmd, " hook --client "+h.client) || strings.Contains(cmd, " wait --client "+h.client)
}

// renderJSON renders v for a place at depth in a file indented by unit.
func renderJSON(v any, depth int, unit string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent(strings.Repeat(unit, depth), unit)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// installHooks returns text with Crosstalk's hooks for h, each present
// once with the command for exe. Entries already there are left alone and
// stale ones (another path) replaced; every other byte stays as it was.
func installHooks(h hookSettings, text, exe string) (string, error) {
	if strings.TrimSpace(text) == "" {
		text = "{}\n"
		if h.cursor {
			text = "{\n  \"version\": 1\n}\n"
		}
	}
	want := map[string]bool{}
	for _, e := range h.entries {
		want[h.handler(e, exe)["command"].(string)] = true
	}
	text, err := removeHooks(h, text, func(cmd string) bool { return !want[cmd] })
	if err != nil {
		return "", err
	}
	root, err := parseJSONSpans(text)
	if err != nil {
		return "", fmt.Errorf("read settings: %w", err)
	}
	if root.kind != '{' {
		return "", errors.New("settings file is not a JSON object")
	}
	unit := indentUnit(text)
	hooks := root.member("hooks")
	if hooks != nil && hooks.kind != '{' {
		return "", errors.New(`settings "hooks" is not an object`)
	}
	missing, order := missingHooks(h, hooks, exe)
	if hooks == nil {
		obj := orderedJSON{keys: order, vals: map[string]any{}}
		for k, v := range missing {
			obj.vals[k] = v
		}
		return applyEdits(text, []jsonEdit{appendRaw(root, `"hooks": `+renderJSON(obj, root.depth+1, unit), unit)}), nil
	}
	edits, err := addHookEdits(hooks, missing, order, unit)
	if err != nil {
		return "", err
	}
	return applyEdits(text, edits), nil
}

// missingHooks returns h's entries for exe that hooks (the settings'
// "hooks" object, or nil when there is none) does not hold yet, by event,
// and the events in the order of h's entries.
func missingHooks(h hookSettings, hooks *jsonSpan, exe string) (map[string][]any, []string) {
	missing := map[string][]any{}
	var order []string
	for _, e := range h.entries {
		if hooks != nil {
			cmd := h.handler(e, exe)["command"].(string)
			arr := hooks.member(e.event)
			if arr != nil && arr.kind == '[' && hasCommand(h, arr, cmd) {
				continue
			}
		}
		if missing[e.event] == nil {
			order = append(order, e.event)
		}
		missing[e.event] = append(missing[e.event], h.entry(e, exe))
	}
	return missing, order
}

// addHookEdits returns the edits that add the missing entries to the
// "hooks" object: appended to an event's array where it has one, and as
// new members, in one edit, where it has none.
func addHookEdits(hooks *jsonSpan, missing map[string][]any, order []string, unit string) ([]jsonEdit, error) {
	var edits []jsonEdit
	newEvents := orderedJSON{vals: map[string]any{}}
	for _, ev := range order {
		arr := hooks.member(ev)
		if arr == nil {
			newEvents.keys = append(newEvents.keys, ev)
			newEvents.vals[ev] = missing[ev]
			continue
		}
		if arr.kind != '[' {
			return nil, fmt.Errorf("settings hooks.%s is not an array", ev)
		}
		var items []string
		for _, v := range missing[ev] {
			items = append(items, renderJSON(v, arr.depth+1, unit))
		}
		edits = append(edits, appendRaw(arr, strings.Join(items, ",\n"+strings.Repeat(unit, arr.depth+1)), unit))
	}
	if len(newEvents.keys) > 0 {
		// Members added to one object go in one edit at one position.
		var members []string
		for _, ev := range newEvents.keys {
			members = append(members, fmt.Sprintf("%q: %s", ev, renderJSON(newEvents.vals[ev], hooks.depth+1, unit)))
		}
		edits = append(edits, appendRaw(hooks, strings.Join(members, ",\n"+strings.Repeat(unit, hooks.depth+1)), unit))
	}
	return edits, nil
}

// hasCommand reports whether an event array already holds command cmd.
func hasCommand(h hookSettings, arr *jsonSpan, cmd string) bool {
	for _, item := range arr.vals {
		for _, handler := range handlersOf(h, item) {
			if c := handler.member("command"); c != nil && c.str == cmd {
				return true
			}
		}
	}
	return false
}

// handlersOf lists the handlers an event-array item holds.
func handlersOf(h hookSettings, item *jsonSpan) []*jsonSpan {
	if h.grouped {
		if list := item.member("hooks"); list != nil && list.kind == '[' {
			return list.vals
		}
		return nil
	}
	return []*jsonSpan{item}
}

// removeHooks removes Crosstalk's handlers for h whose command drop
// accepts, one at a time (so that no two edits touch), and the groups left
// empty by it.
func removeHooks(h hookSettings, text string, drop func(cmd string) bool) (string, error) {
	for {
		root, err := parseJSONSpans(text)
		if err != nil {
			return "", fmt.Errorf("read settings: %w", err)
		}
		edit, found := findCrosstalkHandler(h, root.member("hooks"), drop)
		if !found {
			return text, nil
		}
		text = applyEdits(text, []jsonEdit{edit})
	}
}

// findCrosstalkHandler returns the edit that removes the first matching
// handler: its whole group when it is the group's only handler.
func findCrosstalkHandler(h hookSettings, hooks *jsonSpan, drop func(string) bool) (jsonEdit, bool) {
	if hooks == nil || hooks.kind != '{' {
		return jsonEdit{}, false
	}
	for _, arr := range hooks.vals {
		if arr.kind != '[' {
			continue
		}
		for i, item := range arr.vals {
			handlers := handlersOf(h, item)
			for j, handler := range handlers {
				c := handler.member("command")
				if c == nil || !h.isCrosstalkCommand(c.str) || !drop(c.str) {
					continue
				}
				if !h.grouped || len(handlers) == 1 {
					return removeItem(arr, i), true
				}
				return removeItem(item.member("hooks"), j), true
			}
		}
	}
	return jsonEdit{}, false
}

// orderedJSON is a JSON object whose keys keep their order.
type orderedJSON struct {
	keys []string
	vals map[string]any
}

// MarshalJSON renders the members in order.
func (o orderedJSON) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(k)
		val, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeSettings replaces path's content atomically, after copying the old
// content to path.crosstalk-backup; the file's mode is kept.
func writeSettings(path string, old []byte, existed bool, text string) (backup string, err error) {
	mode := fs.FileMode(0o644)
	if info, err := os.Stat(path); err == nil {
		mode = info.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if existed {
		backup = path + ".crosstalk-backup"
		if err := os.WriteFile(backup, old, mode); err != nil {
			return "", fmt.Errorf("write backup: %w", err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".crosstalk-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return "", err
	}
	return backup, os.Rename(tmp.Name(), path)
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// hookSettings is where and how one client keeps its hooks, for `hooks
// install` and `hooks uninstall`.
type hookSettings struct {
	client        string
	user, project string // the settings file below home and project directory
	dirEnv        string // the variable that, set, names the user file's directory instead
	// grouped entries are {"hooks": [handler]} groups (Claude Code, Codex,
	// Gemini CLI); otherwise an entry is the handler itself.
	grouped bool
	// cursor handlers are {"command": ...} only, in a file with "version": 1.
	cursor bool
	// section is the top-level member holding the event arrays: "hooks",
	// or for Antigravity CLI the name of our hook suite.
	section string
	entries []hookEntry
}

// hookEntry is one hook Crosstalk installs.
type hookEntry struct {
	event       string
	args        string // after the binary: "hook --client X" or "wait ..."
	timeout     int    // in the unit the client documents (s, or ms for Gemini)
	asyncRewake bool
}

// hookEntries is one `hook --client` entry of client for each event.
func hookEntries(client string, timeout int, events ...string) []hookEntry {
	return mapSlice(events, func(ev string) hookEntry {
		return hookEntry{event: ev, args: "hook --client " + client, timeout: timeout}
	})
}

// hookInstallTargets are the clients `hooks install` knows; the paths and
// shapes are those in testdata/hooks/README.md's documentation pages.
var hookInstallTargets = map[string]hookSettings{
	"claude-code": {client: "claude-code", user: ".claude/settings.json", project: ".claude/settings.json", grouped: true, section: "hooks",
		dirEnv: "CLAUDE_CONFIG_DIR", entries: append(hookEntries("claude-code", 10, "SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"),
			// The background waiter that wakes an idle session (exit 2),
			// re-armed at every session start and every stop.
			hookEntry{event: "SessionStart", args: "wait --client claude-code --timeout 55m", timeout: 3600, asyncRewake: true},
			hookEntry{event: "Stop", args: "wait --client claude-code --timeout 55m", timeout: 3600, asyncRewake: true})},
	"codex": {client: "codex", user: ".codex/hooks.json", project: ".codex/hooks.json", dirEnv: "CODEX_HOME", grouped: true, section: "hooks",
		entries: hookEntries("codex", 10, "SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")},
	"gemini": {client: "gemini", user: ".gemini/settings.json", project: ".gemini/settings.json", grouped: true, section: "hooks",
		entries: hookEntries("gemini", 10000, "SessionStart", "BeforeAgent", "AfterTool", "AfterAgent")},
	// VS Code: no waiter, as asyncRewake is not one of its hook properties.
	"vscode": {client: "vscode", user: ".copilot/hooks/crosstalk.json", project: ".github/hooks/crosstalk.json", section: "hooks",
		entries: hookEntries("vscode", 10, "SessionStart", "PostToolUse", "Stop")},
	// Antigravity CLI: a file of named hook suites, PreInvocation a flat
	// array of handlers (google-gemini/gemini-cli
	// docs/resources/migrating-to-antigravity-cli.md, antigravity.google/docs/hooks).
	"antigravity": {client: "antigravity", user: ".gemini/config/hooks.json", project: ".agents/hooks.json", section: "crosstalk",
		entries: []hookEntry{{event: "PreInvocation", args: "hook --client antigravity --event PreInvocation", timeout: 10}}},
	"cursor": {client: "cursor", user: ".cursor/hooks.json", project: ".cursor/hooks.json", cursor: true, section: "hooks",
		entries: hookEntries("cursor", 0, "sessionStart", "stop")},
}

// settingsPath is the settings file of a scope: below the home directory
// (or dirEnv's) for "user" and below the project directory for "project".
func (h hookSettings) settingsPath(scope, home, projectDir string) string {
	base, file := home, h.user
	if scope == "project" {
		base, file = projectDir, h.project
	} else if dir := os.Getenv(h.dirEnv); h.dirEnv != "" && dir != "" {
		base, file = dir, filepath.Base(h.user)
	}
	return filepath.Join(base, filepath.FromSlash(file))
}

// hookLauncher is how an installed hook command starts this binary: its
// path and, when known, the server's groups directory, which a hook run in
// the client's environment would not otherwise find.
type hookLauncher struct{ exe, groupsDir string }

// command is the shell command line of one hook, with forward slashes in
// its paths: Windows shells, Git Bash (Claude Code's) too, take them as they are.
func (l hookLauncher) command(e hookEntry) string {
	cmd := shellQuote(filepath.ToSlash(l.exe)) + " " + e.args
	if l.groupsDir != "" {
		cmd += " --groups-dir " + shellQuote(filepath.ToSlash(l.groupsDir))
	}
	return cmd
}

// entry is the JSON of one item of an event's array: the handler, or a
// group holding it.
func (h hookSettings) entry(e hookEntry, l hookLauncher) any {
	if h.cursor {
		return map[string]any{"command": l.command(e)}
	}
	v := map[string]any{"type": "command", "command": l.command(e), "timeout": e.timeout}
	if e.asyncRewake {
		v["asyncRewake"] = true
	}
	if h.grouped {
		return map[string]any{"hooks": []any{v}}
	}
	return v
}

// shellQuote quotes a path holding anything but safe characters, so that
// the hook's shell passes it verbatim, with no splitting or expansion.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:") == "" {
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
// once with the command l starts, stale ones replaced and every other byte
// as it was.
func installHooks(h hookSettings, text string, l hookLauncher) (string, error) {
	if strings.TrimSpace(text) == "" {
		text = h.emptySettings()
	}
	want := setOf(mapSlice(h.entries, l.command))
	text, err := removeHooks(h, text, func(cmd string) bool { return !want[cmd] }, func(string) bool { return false })
	if err != nil {
		return "", err
	}
	root, _ := parseJSONSpans(text) // removeHooks returns only text it parsed
	if root.kind != '{' {
		return "", errors.New("settings file is not a JSON object")
	}
	unit := indentUnit(text)
	hooks := root.member(h.section)
	if hooks != nil && hooks.kind != '{' {
		return "", fmt.Errorf("settings %q is not an object", h.section)
	}
	if hooks == nil {
		// A missing section is added empty, then filled as an existing one.
		return installHooks(h, applyEdits(text, []jsonEdit{appendRaw(text, root, fmt.Sprintf("%q: {}", h.section), unit)}), l)
	}
	edits, err := addHookEdits(h, text, hooks, l, unit)
	if err != nil {
		return "", err
	}
	return applyEdits(text, edits), nil
}

// emptySettings is the file installHooks starts from when there is none.
func (h hookSettings) emptySettings() string {
	if h.cursor {
		return "{\n  \"version\": 1\n}\n"
	}
	return "{}\n"
}

// addHookEdits returns the edits that add h's entries for l that hooks in
// text does not hold yet: appended to an event's existing array, or as new
// members in one edit.
func addHookEdits(h hookSettings, text string, hooks *jsonSpan, l hookLauncher, unit string) ([]jsonEdit, error) {
	missing := map[string][]any{} // by event; order lists the events in entry order
	var order []string
	for _, e := range h.entries {
		if arr := hooks.member(e.event); arr != nil && arr.kind == '[' && hasCommand(h, arr, l.command(e)) {
			continue
		}
		if missing[e.event] == nil {
			order = append(order, e.event)
		}
		missing[e.event] = append(missing[e.event], h.entry(e, l))
	}
	var edits []jsonEdit
	var members []string // the new events' arrays, one member a line
	for _, ev := range order {
		arr := hooks.member(ev)
		if arr == nil {
			members = append(members, fmt.Sprintf("%q: %s", ev, renderJSON(missing[ev], hooks.depth+1, unit)))
			continue
		}
		if arr.kind != '[' {
			return nil, fmt.Errorf("settings hooks.%s is not an array", ev)
		}
		items := mapSlice(missing[ev], func(v any) string { return renderJSON(v, arr.depth+1, unit) })
		edits = append(edits, appendRaw(text, arr, strings.Join(items, ",\n"+strings.Repeat(unit, arr.depth+1)), unit))
	}
	if len(members) > 0 {
		// Members added to one object go in one edit at one position.
		edits = append(edits, appendRaw(text, hooks, strings.Join(members, ",\n"+strings.Repeat(unit, hooks.depth+1)), unit))
	}
	return edits, nil
}

// hasCommand reports whether an event array already holds command cmd.
func hasCommand(h hookSettings, arr *jsonSpan, cmd string) bool {
	return slices.ContainsFunc(arr.vals, func(item *jsonSpan) bool {
		return slices.ContainsFunc(handlersOf(h, item), func(handler *jsonSpan) bool {
			c := handler.member("command")
			return c != nil && c.str == cmd
		})
	})
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

// uninstallHooks returns text without Crosstalk's hooks for h, and whether
// the file is to be removed. When backup (nil for none) holds what text
// holds without our hooks, nothing else has changed since the install and
// those bytes are returned as they were. Otherwise our hooks go, with the
// groups, arrays and section they leave empty but a backup free of our
// hooks has, and a file left as install would start it is to be removed.
func uninstallHooks(h hookSettings, text string, backup *string) (string, bool, error) {
	prune, clean, cleanErr := dropAll, "", error(nil)
	if backup != nil {
		clean, cleanErr = removeHooks(h, *backup, dropAll, dropAll) // installHooks read it: unreadable here is blank
		if had, _ := parseJSONSpans(*backup); cleanErr == nil && clean == *backup {
			sec := had.member(h.section) // the user's own section and arrays stay, even left empty
			prune = func(event string) bool { return sec == nil || event != "" && sec.member(event) == nil }
		}
	}
	stripped, err := removeHooks(h, text, dropAll, prune)
	if err != nil || stripped == text {
		return text, false, err
	}
	if backup != nil {
		// Any binary path will do: its hooks are stripped again.
		installed, err := installHooks(h, *backup, hookLauncher{exe: "crosstalk-mcp"})
		again, _ := removeHooks(h, installed, dropAll, prune)
		if err == nil && again == stripped && (clean == *backup || cleanErr != nil) {
			return *backup, false, nil
		}
	}
	return stripped, stripped == h.emptySettings(), nil
}

// dropAll is removeHooks' drop and prune for uninstall: all of ours goes.
func dropAll(string) bool { return true }

// removeHooks removes Crosstalk's handlers for h whose command drop
// accepts, one at a time so that no two edits touch, and the groups left
// empty; also the emptied event arrays and section ("") that prune accepts:
// install keeps them to put its new entries in place.
func removeHooks(h hookSettings, text string, drop, prune func(string) bool) (string, error) {
	for {
		root, err := parseJSONSpans(text)
		if err != nil {
			return "", fmt.Errorf("read settings: %w", err)
		}
		edit, found := findCrosstalkHandler(h, root, drop, prune)
		if !found {
			return text, nil
		}
		text = applyEdits(text, []jsonEdit{edit})
	}
}

// findCrosstalkHandler returns the edit that removes the first matching
// handler, with what it leaves empty (see removeHooks).
func findCrosstalkHandler(h hookSettings, root *jsonSpan, drop, prune func(string) bool) (jsonEdit, bool) {
	hooks := root.member(h.section)
	if hooks == nil || hooks.kind != '{' {
		return jsonEdit{}, false
	}
	for k, arr := range hooks.vals {
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
				switch {
				case h.grouped && len(handlers) > 1:
					return removeItem(item.member("hooks"), j), true
				case len(arr.vals) > 1 || !prune(hooks.keys[k].str):
					return removeItem(arr, i), true
				case len(hooks.vals) > 1 || !prune(""):
					return removeItem(hooks, k), true
				}
				return removeItem(root, slices.Index(root.vals, hooks)), true
			}
		}
	}
	return jsonEdit{}, false
}

// backupSuffix names the copy of a settings file's previous bytes that
// every write of it keeps beside it.
const backupSuffix = ".crosstalk-backup"

// settingsTarget returns the file a write of the settings file path
// changes, and the mode to keep: path, or the file a symbolic link at path
// points to, so that the user's link stays. It refuses a link to nothing,
// anything but a regular file, and a read-only file (owner's write bit off
// or not openable for writing): that is the user's choice to keep.
func settingsTarget(path string) (string, fs.FileMode, error) {
	target, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(path); err == nil {
			return "", 0, fmt.Errorf("%s is a symbolic link to a missing file; create that file or remove the link", path)
		}
		return path, 0o644, nil
	}
	if err != nil {
		return "", 0, err
	}
	info, err := os.Stat(target)
	if err != nil {
		return "", 0, err
	}
	if !info.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is not a regular file", target)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err == nil {
		err = f.Close()
	}
	if err != nil || info.Mode().Perm()&0o200 == 0 {
		return "", 0, fmt.Errorf("%s is read-only; make it writable (chmod u+w) to change its hooks", target)
	}
	return target, info.Mode().Perm(), nil
}

// writeSettings replaces the content of target (settingsTarget's answer),
// which held old if it existed, atomically with text; mode is kept.
func writeSettings(target string, mode fs.FileMode, old []byte, existed bool, text string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".crosstalk-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(text)
	if err = errors.Join(err, tmp.Chmod(mode), tmp.Close()); err != nil {
		return err
	}
	if err := settingsUnchanged(target, old, existed); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// settingsUnchanged refuses to replace or remove the settings file at path
// when it no longer holds old (or exists when it did not): the client, an
// editor or another install wrote it since, and that edit must not be lost
// under ours. Running the command again starts from the new content.
func settingsUnchanged(path string, old []byte, existed bool) error {
	now, err := os.ReadFile(path)
	if (err == nil) != existed || !bytes.Equal(now, old) {
		return fmt.Errorf("%s changed while the hooks were being edited; run the command again", path)
	}
	return nil
}

// writeBackup writes data to a new file at name, replacing the old backup.
// O_EXCL never follows a symbolic link, so a link planted at that name, say
// in a cloned project, is removed, never written through.
func writeBackup(name string, data []byte, mode fs.FileMode) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

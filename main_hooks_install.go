package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// hooksInstallCommand is one `crosstalk-mcp hooks install|uninstall` run.
type hooksInstallCommand struct {
	install bool
	target  hookSettings
	scope   string
	dryRun  bool
}

// runHooksInstall runs `hooks install` and `hooks uninstall`: it installs or
// removes Crosstalk's hooks in a client's settings file idempotently,
// leaving every other byte as it was, with a backup of the old file;
// --dry-run prints the change instead.
func runHooksInstall(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall") {
		fmt.Fprintln(stderr, "usage: crosstalk-mcp hooks install|uninstall --client NAME [--scope user|project] [--dry-run]")
		return 2
	}
	fs := flag.NewFlagSet("hooks "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := fs.String("client", "", "claude-code, codex, gemini, vscode or cursor")
	scope := fs.String("scope", "user", "user (your home directory) or project (the current directory)")
	dryRun := fs.Bool("dry-run", false, "print the change without writing it")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	target, ok := hookInstallTargets[*client]
	if !ok {
		fmt.Fprintf(stderr, "crosstalk-mcp hooks: --client must be one of %s\n", strings.Join(hookClientNames(), ", "))
		return 2
	}
	cmd := hooksInstallCommand{install: args[0] == "install", target: target, scope: *scope, dryRun: *dryRun}
	if err := cmd.run(stdout); err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp hooks: %v\n", err)
		return 1
	}
	return 0
}

// run edits the settings file the command names (installHooks and
// removeHooks in routing_hooks_install.go do the editing) and reports
// what it did on stdout.
func (c hooksInstallCommand) run(stdout io.Writer) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	path, err := c.target.settingsPath(c.scope, home, cwd)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var text string
	if c.install {
		text, err = installHooks(c.target, string(old), exe)
	} else if existed {
		text, err = removeHooks(c.target, string(old), func(string) bool { return true })
	} else {
		text = ""
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if text == string(old) {
		fmt.Fprintf(stdout, "%s: nothing to change\n", path)
		return nil
	}
	if c.dryRun {
		fmt.Fprint(stdout, lineDiff(path, string(old), text))
		return nil
	}
	backup, err := writeSettings(path, old, existed, text)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	verb := "installed in"
	if !c.install {
		verb = "removed from"
	}
	fmt.Fprintf(stdout, "Crosstalk hooks %s %s", verb, path)
	if backup != "" {
		fmt.Fprintf(stdout, " (previous file kept as %s)", backup)
	}
	fmt.Fprintln(stdout)
	return nil
}

// lineDiff shows the changed lines between old and new: the unchanged
// lines around them are left out.
func lineDiff(path, old, new string) string {
	a, b := strings.SplitAfter(old, "\n"), strings.SplitAfter(new, "\n")
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s (after install)\n@@ line %d @@\n", path, path, pre+1)
	for _, l := range a[pre : len(a)-suf] {
		out.WriteString("-" + strings.TrimSuffix(l, "\n") + "\n")
	}
	for _, l := range b[pre : len(b)-suf] {
		out.WriteString("+" + strings.TrimSuffix(l, "\n") + "\n")
	}
	return out.String()
}

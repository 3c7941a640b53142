// Command crosstalk-mcp is a Model Context Protocol server that lets separate
// AI contexts talk in groups stored as SQLite databases on a shared filesystem.
//
// With no arguments it serves MCP over stdio; "crosstalk-mcp observe" serves a
// local dashboard, read-only for group data; the Storage view's two
// maintenance actions write the audit database (observe_page.go).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// version is the release reported by --version and serverInfo.version. It is
// stamped at build time with -ldflags "-X main.version=1.2.3"; the default is
// the VERSION file's release (main_release_test.go keeps the two equal), so
// that a plain go install reports it too.
var version = "1.2.0"

// compatibility is --version's second line: the Python original's release
// whose wire and disk behaviour this port mirrors, whatever its own version.
const compatibility = "compatible with crosstalk-mcp-server 1.1.10 (Python)"

// usage is printed by --help. Its wording follows the original's so scripts
// that grep it keep working ("read-only" and "observer dashboard" included);
// the observe line also says what the dashboard writes.
const usage = `Usage: crosstalk-mcp [COMMAND]

Run without a command to start the stdio MCP server.

Commands:
  serve [--http ADDR] [OPTIONS]
                               Serve MCP over stdio (the default) or, with --http,
                               over Streamable HTTP for agents on other machines.
  observe [OPTIONS]            Start the local observer dashboard: read-only for
                               group data; the Storage view's two maintenance
                               actions write the audit database.
    --silent                   Do not open a browser automatically.
    --port PORT                Bind exactly this loopback port.
    --poll-interval SECONDS    Set the observer refresh interval (default: 0.5).
    --groups-dir PATH          Read group databases from this directory.
    --demo [--keep]            Show demo agents' data in a temporary directory.
  hook --client NAME [--event EVENT] [--context-id ID]
                               Answer a client's hook (antigravity, claude-code,
                               codex, cursor, vscode, gemini) with its new mail.
  wait [--client NAME] [--timeout D] [--context-id ID]
                               Block until the member has a wakeup; print it on
                               stderr and exit 2 (Claude Code asyncRewake).
  hooks install|uninstall --client NAME [--scope user|project] [--dry-run]
                               Add Crosstalk's hooks to (or remove them from) a
                               client's settings file, keeping everything else.
  status [--context-id ID] [--events N]
                               Summarize a member's groups, unread mail and
                               wakeup delivery states.
  tokens add|list --tokens-file PATH
                               Make or list the per-agent tokens of serve --http.
  doctor [--repair] [--groups-dir PATH]
                               List group files no server can use; --repair
                               moves them into the damaged/ folder.

Options:
  -h, --help                   Show this help message.
  --version                    Show the installed Crosstalk version.

Run 'crosstalk-mcp COMMAND --help' for a command's options.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches the command line and returns the process exit status, so
// that tests can drive the CLI without a subprocess.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return runStdio(stdin, stdout, stderr)
	}
	switch args[0] {
	case "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version":
		fmt.Fprintln(stdout, version)
		fmt.Fprintln(stdout, compatibility)
		return 0
	case "serve":
		return runServe(args[1:], stdin, stdout, stderr)
	case "observe":
		return runObserve(args[1:], stdout, stderr, groupsDirFromEnv)
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "hook":
		return runHook(args[1:], stdin, stdout, stderr)
	case "wait":
		return runWait(args[1:], stdin, stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout, stderr)
	case "hooks":
		return runHooksInstall(args[1:], stdout, stderr)
	case "tokens":
		return runTokens(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "Unknown command: %s; run 'crosstalk-mcp --help'\n", args[0])
	return 2
}

// parseFlags parses a command's arguments, which are all flags, with the
// flag package: every command takes -name and --name alike, and answers -h
// and --help with flag.ErrHelp. Other errors name flags in the usage
// texts' double-dash style; commandExit reports both kinds.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		msg := strings.Replace(err.Error(), "flag provided but not defined", "unrecognized option", 1)
		return errors.New(singleDashFlag.ReplaceAllString(msg, "$1--$2"))
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// singleDashFlag finds the flag names in the flag package's error messages.
var singleDashFlag = regexp.MustCompile(`(: | flag | for )-(\w)`)

// commandExit ends a command whose command line was refused: for
// flag.ErrHelp with help on stdout and status 0, for any other error with
// one line on stderr that points at the command's --help, and status 2.
func commandExit(command, help string, err error, stdout, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, help)
		return 0
	}
	fmt.Fprintf(stderr, "crosstalk-mcp %s: %v; run 'crosstalk-mcp %s --help'\n", command, err, command)
	return 2
}

// groupsDirFromEnv returns CROSSTALK_GROUPS_DIR, or ~/.cache/crosstalk when it
// is unset or empty.
func groupsDirFromEnv() (string, error) {
	if dir := os.Getenv("CROSSTALK_GROUPS_DIR"); dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find home directory for the default groups directory: %w", err)
	}
	return filepath.Join(home, ".cache", "crosstalk"), nil
}

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// statusOptions are `crosstalk-mcp status`'s settings.
type statusOptions struct {
	contextID string
	events    int // the newest wake events and sent messages listed per group
}

const statusHelp = `usage: crosstalk-mcp status [--context-id ID] [--events N] [--groups-dir PATH]

Summarize a member's groups, unread mail, wakeup delivery states and the
receipts of the messages it sent.

options:
  --context-id ID     the member's context_id (default: $CROSSTALK_CONTEXT_ID)
  --events N          show the newest N wake events and sent messages of each
                      group, oldest first (default: 5)
  --groups-dir PATH   the groups directory (default: $CROSSTALK_GROUPS_DIR, else
                      ~/.cache/crosstalk)
`

// runStatus prints memberStatus's summary of one member: its groups, how
// far each recent wake event got (created → notified → delivered by hook,
// wait, tool or channel → read) and the receipts of what it sent.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	contextID := fs.String("context-id", "", "")
	events := fs.Int("events", 5, "")
	groupsDir := fs.String("groups-dir", "", "")
	err := parseFlags(fs, args)
	opts := statusOptions{contextID: resolveContextID("", *contextID), events: *events}
	if err == nil && opts.contextID == "" {
		err = errors.New("--context-id is required (or CROSSTALK_CONTEXT_ID)")
	}
	if err == nil && opts.events < 1 {
		err = fmt.Errorf("--events must be at least 1, not %d", opts.events)
	}
	if err != nil {
		return commandExit("status", statusHelp, err, stdout, stderr)
	}
	var text string // "" on failure
	st, err := openCommandStore("status", *groupsDir, stderr)
	if err == nil {
		defer st.close()
		text, err = memberStatus(st, opts)
	}
	fmt.Fprint(stdout, text)
	return commandStatus("status", err, stderr)
}

// memberStatus renders the summary runStatus prints, with the receipts of
// the member's newest opts.events messages in each group.
func memberStatus(st *store, opts statusOptions) (string, error) {
	groups, err := st.memberships(opts.contextID)
	if err != nil {
		return "", err
	}
	var unread, wakes int64
	for _, g := range groups {
		unread += g.unread
		wakes += g.wakeups
	}
	var b strings.Builder
	fmt.Fprintf(&b, "context_id %s: %s, %s, %s\n", opts.contextID,
		plural(int64(len(groups)), "group"), plural(unread, "unread message"), plural(wakes, "pending wakeup"))
	for _, g := range groups {
		name := cmp.Or(g.groupName, "(unnamed)")
		fmt.Fprintf(&b, "- %s %q as %q: %s, %s\n", g.groupID, name, g.name, plural(g.unread, "unread"), plural(g.wakeups, "pending wakeup"))
		ds, err := st.wakeups(g.groupID, opts.contextID, opts.events)
		if err != nil {
			return "", err
		}
		for _, d := range ds {
			b.WriteString("    " + describeDelivery(d) + "\n")
		}
		ids, byMessage, err := st.sentReceipts(g.groupID, opts.contextID, opts.events)
		if err != nil {
			return "", err
		}
		for _, id := range ids {
			fmt.Fprintf(&b, "    sent message %d: %q\n", id, describeReceipts(byMessage[id])) // quoted, as names are anyone's
		}
	}
	return b.String(), nil
}

// describeDelivery is one wake event's line: each state with its time.
func describeDelivery(d delivery) string {
	at := func(ts *string, more string) string {
		if ts == nil {
			return "-"
		}
		return *ts + more
	}
	return fmt.Sprintf("message %d (%s, %s) %s: created %s, notified %s, delivered %s, read %s",
		d.messageID, d.relevance, d.priority, d.state(), d.createdAt, at(d.notifiedAt, ""), at(d.deliveredAt, " by "+d.deliveredVia), at(d.readAt, ""))
}

// plural renders "1 group" or "2 groups"; "unread" stays as it is.
func plural(n int64, noun string) string {
	if n == 1 || noun == "unread" {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

const doctorHelp = `usage: crosstalk-mcp doctor [--repair] [--groups-dir PATH]

List the group files in the groups directory that no server can use.

options:
  --repair            move them into the damaged/ folder of the groups directory
  --groups-dir PATH   the groups directory (default: $CROSSTALK_GROUPS_DIR, else
                      ~/.cache/crosstalk)
`

// runDoctor is `crosstalk-mcp doctor`: it lists the files in the groups
// directory that no server can use and, with --repair, moves them into
// damaged/. Exit status: 0 when nothing unusable remains, 1 when something
// does (or a move failed), 2 for a usage error.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	repair := fs.Bool("repair", false, "")
	dir := fs.String("groups-dir", "", "")
	if err := parseFlags(fs, args); err != nil {
		return commandExit("doctor", doctorHelp, err, stdout, stderr)
	}
	if *dir == "" {
		var err error
		if *dir, err = groupsDirFromEnv(); err != nil {
			return commandStatus("doctor", err, stderr)
		}
	}
	if err := groupsDirReadable(*dir); err != nil {
		return commandStatus("doctor", err, stderr)
	}
	findings, checked, err := doctorScan(*dir, time.Now())
	if err != nil {
		return commandStatus("doctor", err, stderr)
	}
	remaining := 0
	for _, f := range findings {
		var note string
		switch {
		case !*repair:
		case f.keep != "":
			note = "; left in place, " + f.keep
		default:
			dest, err := moveAside(*dir, f.name)
			if err == nil {
				fmt.Fprintf(stdout, "moved %s to %s: %s\n", f.name, dest, f.problem)
				continue
			}
			note = fmt.Sprintf("; could not move it aside: %v", err)
		}
		fmt.Fprintf(stdout, "damaged %s: %s%s\n", f.name, f.problem, note)
		remaining++
	}
	fmt.Fprintf(stdout, "%s checked in %s, %d unusable, %d left\n", plural(int64(checked), "group file"), *dir, len(findings), remaining)
	if remaining > 0 {
		return 1
	}
	return 0
}

// observeHelp is the usage of "crosstalk-mcp observe".
const observeHelp = `usage: crosstalk-mcp observe [--silent] [--port PORT] [--poll-interval SECONDS] [--groups-dir PATH] [--demo [--keep]]

Open Crosstalk's local observability dashboard.

options:
  --silent              do not open a browser automatically
  --port PORT           bind exactly this loopback port
  --poll-interval SECONDS
                        observer refresh interval in seconds (default: 0.5)
  --groups-dir PATH     directory containing Crosstalk group databases
  --demo                show demo data: a temporary groups directory that a few
                        agents fill through a real MCP session of this binary
  --keep                with --demo, keep the demo directory on exit
`

// runObserve runs "crosstalk-mcp observe" until SIGINT or SIGTERM and
// returns the exit status; groupsDir is the default groups directory.
func runObserve(args []string, stdout, stderr io.Writer, groupsDir func() (string, error)) int {
	opts, err := parseObserveOptions(args)
	if err != nil {
		return commandExit("observe", observeHelp, err, stdout, stderr)
	}
	stopOn := func(ctx context.Context) (context.Context, context.CancelFunc) {
		return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	}
	return observeCommand{stdout, stderr, groupsDir, openWithPlatform, stopOn}.run(opts)
}

// parseObserveOptions parses the observe command line.
func parseObserveOptions(args []string) (observeOptions, error) {
	opts := observeOptions{pollInterval: observePollInterval}
	fs := flag.NewFlagSet("observe", flag.ContinueOnError)
	fs.BoolVar(&opts.silent, "silent", false, "")
	fs.Func("port", "", func(v string) error {
		port, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || port < 1 || port > 65535 {
			return errors.New("port must be an integer between 1 and 65535")
		}
		opts.port = port
		return nil
	})
	fs.Func("poll-interval", "", func(v string) (err error) {
		var ok bool
		if opts.pollInterval, ok = parseSeconds(v); !ok {
			err = errors.New("poll interval must be a finite positive number of seconds")
		}
		return err
	})
	fs.StringVar(&opts.groupsDir, "groups-dir", "", "")
	fs.BoolVar(&opts.demo, "demo", false, "")
	fs.BoolVar(&opts.keep, "keep", false, "")
	if err := parseFlags(fs, args); err != nil {
		return opts, err
	}
	if opts.keep && !opts.demo {
		return opts, errors.New("--keep: only with --demo")
	}
	if opts.demo && opts.groupsDir != "" {
		return opts, errors.New("--demo: not allowed with --groups-dir (the demo makes its own directory)")
	}
	return opts, nil
}

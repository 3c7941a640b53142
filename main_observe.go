package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// observeHelp is the usage of "crosstalk-mcp observe"; the dashboard itself
// is observe.go.
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

// parseObserveOptions parses the options with parseFlags, like every command's.
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
	fs.Func("poll-interval", "", func(v string) error {
		seconds, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds <= 0 {
			return errors.New("poll interval must be a finite positive number of seconds")
		}
		// The ticker needs a representable, non-zero duration.
		opts.pollInterval = time.Duration(math.MaxInt64)
		if nanos := seconds * float64(time.Second); nanos < math.MaxInt64 {
			opts.pollInterval = max(time.Duration(nanos), time.Millisecond)
		}
		return nil
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

package main

// The one convention of every subcommand's command line: flags in either
// dash style, --help on stdout with status 0, usage errors on stderr with
// status 2 and a pointer to --help, failures with status 1.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// parseFlags parses a command's arguments, which are all flags: -name and
// --name alike, -h and --help as flag.ErrHelp. Other errors name flags in
// the usage texts' double-dash style.
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

// commandExit ends a command whose command line was refused: help on stdout
// and status 0 for flag.ErrHelp, else the error on stderr and status 2.
func commandExit(command, help string, err error, stdout, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, help)
		return 0
	}
	fmt.Fprintf(stderr, "crosstalk-mcp %s: %v; run 'crosstalk-mcp %s --help'\n", command, err, command)
	return 2
}

// commandStatus is a command's exit status for the outcome err: 0 for nil,
// else 1 with the error on stderr.
func commandStatus(command string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "crosstalk-mcp %s: %v\n", command, err)
	return 1
}

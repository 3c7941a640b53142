package main

import (
	"flag"
	"fmt"
	"io"
	"time"
)

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
		d, err := groupsDirFromEnv()
		if err != nil {
			fmt.Fprintf(stderr, "crosstalk-mcp doctor: %v\n", err)
			return 1
		}
		*dir = d
	}
	findings, checked, err := doctorScan(*dir, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp doctor: %v\n", err)
		return 1
	}
	remaining := 0
	for _, f := range findings {
		var note string
		switch {
		case !*repair:
		case f.recent:
			note = fmt.Sprintf("; left in place, changed less than %v ago (it may still be being created)", doctorGracePeriod)
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
	fmt.Fprintf(stdout, "%d group files checked in %s, %d unusable, %d left\n", checked, *dir, len(findings), remaining)
	if remaining > 0 {
		return 1
	}
	return 0
}

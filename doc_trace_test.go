package main

import (
	"bufio"
	"go/ast"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSendTrace holds doc.go's trace of one stdio send_message to the files
// that really run it. A coverage build of the server plays the trace twice,
// each time as two processes on one groups directory: bob's joins and
// subscribes to its wakeups, alice's starts; the second time alice sends
// "@bob" and bob's is notified. Every file with a function that ran only the
// second time, for the send, must be in doc.go's list, and every file in the
// list must have run. It logs the lines of the functions that ran, the part
// of each listed file that an auditor following the send has to read.
func TestSendTrace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("doc.go traces the Linux path: inotify")
	}
	if testing.Short() {
		t.Skip("builds the server with coverage")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "crosstalk-mcp-cover")
	build := exec.Command("go", "build", "-cover", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -cover: %v\n%s", err, out)
	}
	groups := filepath.Join(tmp, "groups")
	setup := startProcessOf(t, bin, "setup", groups, "GOCOVERDIR="+t.TempDir())
	setup.initialize()
	gid := setup.createGroup("alice")
	setup.join(gid, "alice", "alice")
	setup.join(gid, "bob", "bob")
	setup.close()

	play := func(send bool) map[string][]coveredBlock {
		cover := t.TempDir()
		bob := startProcessOf(t, bin, "bob", groups, "GOCOVERDIR="+cover)
		bob.initialize()
		uri := bob.join(gid, "bob", "bob")
		bob.result("resources/subscribe", map[string]any{"uri": uri}, nil)
		alice := startProcessOf(t, bin, "alice", groups, "GOCOVERDIR="+cover)
		alice.initialize()
		if send {
			alice.ok("send_message", map[string]any{"group_id": gid, "context_id": "alice", "name": "alice", "message": "@bob please look"}, nil)
			bob.waitNotification(uri, func(n notification) bool { return n.Relevance == "mentioned" })
		}
		alice.close()
		bob.close()
		profile := filepath.Join(tmp, "profile.txt")
		if out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i="+cover, "-o="+profile).CombinedOutput(); err != nil {
			t.Fatalf("go tool covdata: %v\n%s", err, out)
		}
		return readCoverProfile(t, profile)
	}
	before, after := play(false), play(true)

	listed := docTraceFiles(t)
	ran, forSend := map[string]int{}, map[string]bool{}
	for _, fn := range productionFuncs(t) {
		if fn.ranIn(after) {
			ran[fn.file] += fn.end - fn.start + 1
			if !fn.ranIn(before) {
				forSend[fn.file] = true
			}
		}
	}
	for file := range forSend {
		if !slices.Contains(listed, file) {
			t.Errorf("the send runs functions of %s; want it in doc.go's list of the files the path runs through", file)
		}
	}
	total := 0
	for _, file := range listed {
		if ran[file] == 0 {
			t.Errorf("doc.go lists %s; want it run by the send, and no function of it ran", file)
		}
		total += ran[file]
		t.Logf("%-28s %4d lines of functions run", file, ran[file])
	}
	t.Logf("the listed files' functions that ran: %d lines", total)
}

// coveredBlock is a block of a coverage profile: its lines and whether it ran.
type coveredBlock struct {
	start, end int
	ran        bool
}

// readCoverProfile reads a text coverage profile into the blocks of each file,
// by base name.
func readCoverProfile(t *testing.T, path string) map[string][]coveredBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile(`^(.+):(\d+)\.\d+,(\d+)\.\d+ \d+ (\d+)$`)
	blocks := map[string][]coveredBlock{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // the mode line
		}
		start, _ := strconv.Atoi(m[2])
		end, _ := strconv.Atoi(m[3])
		file := filepath.Base(m[1])
		blocks[file] = append(blocks[file], coveredBlock{start, end, m[4] != "0"})
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: got no coverage blocks", path)
	}
	return blocks
}

// funcSpan is a production function's lines.
type funcSpan struct {
	file       string
	start, end int
}

// ranIn reports whether any block inside the function ran.
func (fn funcSpan) ranIn(blocks map[string][]coveredBlock) bool {
	return slices.ContainsFunc(blocks[fn.file], func(b coveredBlock) bool {
		return b.ran && b.start >= fn.start && b.end <= fn.end
	})
}

// productionFuncs lists the functions and methods of the package's non-test
// files.
func productionFuncs(t *testing.T) []funcSpan {
	t.Helper()
	fset := token.NewFileSet()
	var out []funcSpan
	for _, pf := range productionFiles(t, fset) {
		for _, d := range pf.file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				out = append(out, funcSpan{pf.name, fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line})
			}
		}
	}
	return out
}

// docTraceFiles returns the files doc.go's sentence "That path runs through
// ..." names.
func docTraceFiles(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "// That path runs through ")
	paragraph, _, _ := strings.Cut(rest, "//\n")
	files := regexp.MustCompile(`[a-z_]+\.go`).FindAllString(paragraph, -1)
	if !ok || len(files) == 0 {
		t.Fatal(`doc.go: got no "That path runs through" list of files`)
	}
	return files
}

// TestSendTraceLineCount checks the figure doc.go gives for the lines of the
// files the send path runs through, which a change to any of them moves; it
// needs no coverage build, so it runs where TestSendTrace is skipped.
func TestSendTraceLineCount(t *testing.T) {
	total := 0
	for _, file := range docTraceFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		total += strings.Count(string(src), "\n")
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`these\s+//\s+files' ([0-9,]+) lines|these files' ([0-9,]+) lines`).FindSubmatch(doc)
	if m == nil {
		t.Fatal(`doc.go: got no "these files' N lines"; want the trace's line count`)
	}
	got, _ := strconv.Atoi(strings.ReplaceAll(string(m[1])+string(m[2]), ",", ""))
	if got != total {
		t.Errorf("got %d in doc.go's count of the trace files' lines; want %d, their count", got, total)
	}
}

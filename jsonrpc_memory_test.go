package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// peakRSS returns the peak resident set size of process pid (VmHWM).
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read status: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// hugeSend is what hugeSendPeakRSS measured: the line's length, the
// process's peak RSS before the line (start-up and three small calls) and
// after it, and the answer.
type hugeSend struct {
	line         int
	before, peak int64
	answer       string
}

// Texts of huge messages: mostly ASCII with some escapes and non-ASCII, like
// real messages, whose decoded text is 0.84× its JSON; and plain ASCII, the
// worst case, whose text is as long as its JSON.
const (
	mixedChunk = `word \"quoted\" é\n`
	plainChunk = "plain ASCII words "
)

// hugeSendPeakRSS sends one send_message line of about size bytes, its text
// chunk repeated, through the built binary on the groups directory dir and
// returns what it measured.
func hugeSendPeakRSS(t testing.TB, dir string, size int, chunk string, env ...string) hugeSend {
	t.Helper()
	cmd := exec.Command(builtBinary(t))
	cmd.Env = append(append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir, "CROSSTALK_POLL_INTERVAL_SECONDS=3600"), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	r := bufio.NewReaderSize(stdout, 1<<16)
	ask := func(line string) string {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		for {
			answer, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			// A wakeup notification may come first: file events report
			// the session's own commits at once, whatever the poll interval.
			if !strings.HasPrefix(answer, `{"jsonrpc": "2.0", "method": "notifications/`) {
				return answer
			}
		}
	}
	ask(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`)
	io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	text, _ := crashToolText(ask(crashCall(1, "create_group", map[string]any{"context_id": "a"})))
	gid := text[strings.Index(text, "grp_") : strings.Index(text, "grp_")+36]
	ask(crashCall(2, "join_group", map[string]any{"group_id": gid, "context_id": "a", "name": "a"}))
	ask(crashCall(3, "join_group", map[string]any{"group_id": gid, "context_id": "b", "name": "b"}))
	body := strings.Repeat(chunk, size/len(chunk))
	line := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"send_message","arguments":{"caller_name":"m","group_id":"` +
		gid + `","context_id":"a","name":"a","message":"` + body + `"}}}`
	before := peakRSS(t, cmd.Process.Pid)
	answer := ask(line)
	return hugeSend{line: len(line), before: before, peak: peakRSS(t, cmd.Process.Pid), answer: answer}
}

// hugeLineMB is the size of the line TestHugeMessagePeakRSS and
// BenchmarkHugeMessagePeakRSS send: 48 MiB, or CROSSTALK_BIG_LINE_MB.
func hugeLineMB() int {
	if mb, err := strconv.Atoi(os.Getenv("CROSSTALK_BIG_LINE_MB")); err == nil && mb > 0 {
		return mb
	}
	return 48
}

// TestHugeMessagePeakRSS measures the peak resident memory of a
// send_message line over 16 MiB against the line's size, for mixed and for
// plain-ASCII text, and checks that the message is stored and indexed as any
// other. `make test` uses a 48 MiB line; CROSSTALK_BIG_LINE_MB=200 measures
// the 200 MB case.
//
// The line is freed before the insert; what is left at the peak is the
// decoded Go string and SQLite's copies: the bound parameter, the row's
// record and the search trigger's read of new.content. Measured at 48 MiB:
// mixed text 3.8× the line in all (3.5× added to the process's ~14 MiB),
// plain ASCII 4.4× (4.1× added). The bounds fail with one more copy.
func TestHugeMessagePeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is read from /proc; Linux only")
	}
	if testing.Short() {
		t.Skip("sends a message of tens of megabytes")
	}
	for _, c := range []struct {
		name  string
		chunk string
		// peak bounds the whole process's peak RSS, added what the line
		// added to it, both as multiples of the line.
		peak, added float64
	}{
		{"mixed text", mixedChunk, 4.5, 4.2},
		{"plain ASCII", plainChunk, 5.0, 4.7},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			m := hugeSendPeakRSS(t, dir, hugeLineMB()<<20, c.chunk)
			if _, failed := crashToolText(m.answer); failed {
				t.Fatalf("send of a %d-byte line: %.300s", m.line, m.answer)
			}
			mib := func(n int64) float64 { return float64(n) / (1 << 20) }
			ratio, added := float64(m.peak)/float64(m.line), float64(m.peak-m.before)/float64(m.line)
			t.Logf("line %.1f MiB: peak RSS %.1f MiB (%.2f× the line), %.1f MiB before it (%.2f× added)",
				mib(int64(m.line)), mib(m.peak), ratio, mib(m.before), added)
			if ratio > c.peak {
				t.Errorf("peak RSS: got %.2f× the line; want ≤ %.2f×", ratio, c.peak)
			}
			if added > c.added {
				t.Errorf("peak RSS added by the line: got %.2f× its size; want ≤ %.2f×", added, c.added)
			}
			checkHugeMessageStored(t, dir, hugeLineMB()<<20, c.chunk)
		})
	}
}

// checkHugeMessageStored checks the one group in dir after a huge send: the
// message found by search, the index consistent with the rows, and the
// original's search trigger still in place.
func checkHugeMessageStored(t *testing.T, dir string, size int, chunk string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "grp_*.sqlite3"))
	if len(files) != 1 {
		t.Fatalf("group files: got %v; want one", files)
	}
	var decoded string
	if err := json.Unmarshal([]byte(`"`+chunk+`"`), &decoded); err != nil {
		t.Fatal(err)
	}
	db := openTestDB(t, files[0], "rw")
	checks := []struct {
		query string
		args  []any
		want  string
	}{
		{"SELECT count(*) FROM messages WHERE content = ?", []any{strings.Repeat(decoded, size/len(chunk))}, "1"},
		{"SELECT count(*) FROM message_search WHERE content LIKE ?", []any{"%" + decoded + decoded + "%"}, "1"},
		{"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'messages_search_after_insert'", nil, "1"},
		{"PRAGMA integrity_check", nil, "ok"},
	}
	for _, c := range checks {
		var got string
		if err := db.QueryRow(c.query, c.args...).Scan(&got); err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.query, got, err, c.want)
		}
	}
	if _, err := db.Exec("INSERT INTO message_search(message_search) VALUES ('integrity-check')"); err != nil {
		t.Errorf("search index integrity check: %v", err)
	}
}

// BenchmarkHugeMessagePeakRSS reports the peak RSS of one huge send as a
// multiple of its line (peak/line), for CROSSTALK_BIG_LINE_MB sizes.
func BenchmarkHugeMessagePeakRSS(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("VmHWM is read from /proc; Linux only")
	}
	var ratio float64
	for b.Loop() {
		m := hugeSendPeakRSS(b, b.TempDir(), hugeLineMB()<<20, plainChunk)
		ratio = float64(m.peak) / float64(m.line)
	}
	b.ReportMetric(ratio, "peak/line")
}

// TestHugeSendRunsAloneDetached shows that a send_message line of hugeLine
// bytes or more is committed alone, not in a run with the sends pipelined
// behind it, and that what its run keeps refers to nothing of the line,
// which can therefore be freed before the insert.
func TestHugeSendRunsAloneDetached(t *testing.T) {
	const g = "grp_00000000000000000000000000000001"
	s, _ := newTestServer(t)
	s.ready = true
	text := strings.Repeat("huge ", hugeLine/5+1)
	line := []byte(sendLine(7, g, "a", "A", text) + "\n")
	r := bufio.NewReader(strings.NewReader(sendLine(8, g, "a", "A", "x") + "\n" + sendLine(9, g, "a", "A", "y") + "\n"))
	r.Peek(1)
	run := s.pipelinedSends(line, r)
	if len(run) != 1 {
		t.Fatalf("run of a huge send with two small sends buffered: got %d sends; want 1", len(run))
	}
	clear(line) // anything still aliasing the line now reads zeros
	p := run[0]
	if id, _ := p.call.args.str("group_id"); id != g || string(p.req.id) != "7" || string(p.call.requestID) != "7" {
		t.Errorf("after the line was overwritten: group_id %q, request id %q/%q; want %q, 7", id, p.req.id, p.call.requestID, g)
	}
	if p.call.args.has("message") || p.req.params != nil || p.call.args.raw != nil {
		t.Errorf("the run keeps the raw message or params: has message %v, params %d bytes, raw %d bytes",
			p.call.args.has("message"), len(p.req.params), len(p.call.args.raw))
	}
	if p.msg.text != text {
		t.Errorf("decoded text: got %d bytes; want the %d sent", len(p.msg.text), len(text))
	}
	if r.Buffered() == 0 {
		t.Errorf("the pipelined small sends were consumed; want them left for their own run")
	}
}

// TestMaxMessageBytes shows that CROSSTALK_MAX_MESSAGE_BYTES refuses longer
// messages with a validation error naming the limit.
func TestMaxMessageBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the built binary")
	}
	answer := hugeSendPeakRSS(t, t.TempDir(), 2<<20, mixedChunk, "CROSSTALK_MAX_MESSAGE_BYTES=1048576").answer
	text, failed := crashToolText(answer)
	if !failed || !strings.Contains(text, "message") || !strings.Contains(text, "1048576") {
		t.Errorf("a 2 MiB message with a 1 MiB limit: got %.300s; want a validation error naming the limit", text)
	}
}

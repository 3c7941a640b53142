package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// crashChild is one server process of the crash test, driven over its stdio
// by a plain loop: write a few pipelined sends, read their answers, repeat,
// until the test kills it with SIGKILL.
type crashChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	killed sync.Once
}

// startCrashChild starts the built binary on dir and completes the handshake.
func startCrashChild(t *testing.T, dir string) (*crashChild, error) {
	cmd := exec.Command(builtBinary(t))
	cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir, "CROSSTALK_POLL_INTERVAL_SECONDS=3600")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &crashChild{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	if _, err := c.roundTrip(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// roundTrip writes lines (newline-separated requests) and reads one answer
// per request line among them.
func (c *crashChild) roundTrip(lines string) ([]string, error) {
	if _, err := io.WriteString(c.stdin, lines+"\n"); err != nil {
		return nil, err
	}
	var answers []string
	for range strings.Count(lines, `"id":`) {
		line, err := c.stdout.ReadString('\n')
		if err != nil {
			return answers, err
		}
		answers = append(answers, line)
	}
	return answers, nil
}

// kill ends the child and waits for it. The test's timer and the test
// itself may both call it; the second caller waits for the first.
func (c *crashChild) kill() {
	c.killed.Do(func() {
		c.cmd.Process.Kill()
		c.cmd.Wait()
	})
}

// crashCall is one tools/call line with id.
func crashCall(id int, tool string, args map[string]any) string {
	args["caller_name"] = "crash"
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args}})
	return string(b)
}

// crashToolText returns a tools/call answer's text and whether it failed.
func crashToolText(answer string) (string, bool) {
	var msg struct {
		Result struct {
			Content []struct{ Text string } `json:"content"`
			IsError bool                    `json:"isError"`
		} `json:"result"`
	}
	if json.Unmarshal([]byte(answer), &msg) != nil || len(msg.Result.Content) != 1 {
		return answer, true
	}
	return msg.Result.Content[0].Text, msg.Result.IsError
}

// TestE2ECrashSafety runs several server processes sending to one group and
// one creating groups, and kills them with SIGKILL at random moments, so
// that senders die mid-commit, pipelined runs among them. Every send
// that was answered must be stored with its text and none twice, message
// ids must be contiguous, unread counters must match their rows, the
// databases must pass SQLite's and FTS5's integrity checks, and no group
// file may be left without its schema. `make test` runs a few rounds;
// CROSSTALK_SOAK=1 runs for CROSSTALK_SOAK_SECONDS (default 300).
func TestE2ECrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills many server processes")
	}
	duration := 4 * time.Second
	if os.Getenv("CROSSTALK_SOAK") == "1" {
		duration = 300 * time.Second
		if s := os.Getenv("CROSSTALK_SOAK_SECONDS"); s != "" {
			fmt.Sscan(s, &duration)
			duration *= time.Second
		}
	}
	dir := t.TempDir()
	setup, err := startCrashChild(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 3
	answers, err := setup.roundTrip(crashCall(1, "create_group", map[string]any{"context_id": "w0", "name": "crash"}))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := crashToolText(answers[0])
	var created struct {
		GroupID string `json:"group_id"`
	}
	json.Unmarshal([]byte(text), &created)
	gid := created.GroupID
	for i := range writers + 1 {
		member := fmt.Sprintf("w%d", i)
		if i == writers {
			member = "reader" // never reads, so every message stays unread for it
		}
		if a, err := setup.roundTrip(crashCall(2+i, "join_group", map[string]any{"group_id": gid, "context_id": member, "name": member})); err != nil || strings.Contains(a[0], `"isError": true`) {
			t.Fatalf("join %s: %v %v", member, a, err)
		}
	}
	setup.stdin.Close()
	setup.cmd.Wait()

	var mu sync.Mutex
	acked := map[string]bool{} // texts of answered, successful sends
	rounds, kills, creates := 0, 0, 0
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for w := range writers + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			seq := 0
			for time.Now().Before(deadline) {
				c, err := startCrashChild(t, dir)
				if err != nil {
					t.Errorf("start writer: %v", err)
					return
				}
				killAt := time.Now().Add(time.Duration(rng.IntN(150)) * time.Millisecond)
				timer := time.AfterFunc(time.Until(killAt), c.kill)
				for id := 1; time.Now().Before(killAt); id++ {
					var lines []string
					var texts []string
					if w == writers {
						// The last goroutine creates groups, to be killed mid-create.
						lines = append(lines, crashCall(id, "create_group", map[string]any{"context_id": "creator"}))
					} else {
						for range 1 + rng.IntN(4) {
							seq++
							text := fmt.Sprintf("w%d message %d %s", w, seq, strings.Repeat("x", rng.IntN(2000)))
							texts = append(texts, text)
							lines = append(lines, crashCall(id, "send_message", map[string]any{"group_id": gid,
								"context_id": fmt.Sprintf("w%d", w), "name": fmt.Sprintf("w%d", w), "message": text}))
						}
					}
					answers, err := c.roundTrip(strings.Join(lines, "\n"))
					mu.Lock()
					for i, a := range answers {
						if _, failed := crashToolText(a); failed {
							t.Errorf("answered call failed: %.300s", a)
						} else if i < len(texts) {
							acked[texts[i]] = true
						} else {
							creates++
						}
					}
					mu.Unlock()
					if err != nil {
						break
					}
				}
				timer.Stop()
				c.kill()
				mu.Lock()
				rounds++
				kills++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("crash soak: %d rounds, %d SIGKILLs, %d acknowledged sends, %d acknowledged creates in %v", rounds, kills, len(acked), creates, duration)
	if len(acked) == 0 {
		t.Fatal("no send was acknowledged; the test proves nothing")
	}
	checkCrashedGroup(t, dir, gid, acked)
	checkNoDamagedGroups(t, dir)
}

// checkCrashedGroup verifies the shared group after the kills.
func checkCrashedGroup(t *testing.T, dir, gid string, acked map[string]bool) {
	db := openGroupDB(t, dir, gid)
	stored := map[string]bool{}
	for _, text := range queryRows(t, db, "SELECT content FROM messages") {
		if stored[text] {
			// Every text is sent once: a second row is a send stored twice.
			t.Errorf("stored twice: %.60q", text)
		}
		stored[text] = true
	}
	missing := 0
	for text := range acked {
		if !stored[text] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("acknowledged sends not stored: %d of %d", missing, len(acked))
	}
	count, maxID := queryInt(t, db, "SELECT COUNT(*) FROM messages"), queryInt(t, db, "SELECT COALESCE(MAX(id), 0) FROM messages")
	if count != maxID {
		t.Errorf("message ids: got %d rows with max id %d; want contiguous ids 1..%d", count, maxID, count)
	}
	if got := queryInt(t, db, "SELECT unread_count FROM group_members WHERE context_id = 'reader'"); got != count {
		t.Errorf("reader unread_count: got %d; want every message, %d", got, count)
	}
	checkGroupConsistent(t, db)
}

// checkNoDamagedGroups fails for any group file without its schema and any
// group build left under its temporary name that a server could list.
func checkNoDamagedGroups(t *testing.T, dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "grp_*.sqlite3"))
	damaged := 0
	for _, p := range names {
		if err := checkGroupFile(p); err != nil {
			damaged++
			t.Errorf("group file %s: %v", filepath.Base(p), err)
		}
	}
	t.Logf("%d group files, %d damaged", len(names), damaged)
}

package clients

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// textOnly answers every main request with text.
func textOnly(int, modelRequest) modelReply { return modelReply{text: "Done."} }

// Time limits. Each is a bound on a wait for the client, which normally
// takes well under a second; together they keep a failing run short.
const (
	startLimit  = 30 * time.Second // Claude Code's start, up to its first request
	wakeLimit   = 15 * time.Second // a delivery that should take milliseconds
	quietPeriod = 3 * time.Second  // no request for this long: the client is idle
	exitLimit   = 15 * time.Second // a headless run exiting after its last turn
	waiterLimit = 3 * time.Second  // a waiter noticing its session ended
)

// runBounded runs Claude Code to its end or until limit, reporting whether
// it hung.
func runBounded(t *testing.T, s *session, name string, args []string, limit time.Duration) (hung bool) {
	cmd := s.command(args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("claude exited: %v; stderr: %s", err, errb.String())
		}
		s.checkWaiters(name)
	case <-time.After(limit):
		hung = true
	}
	kill(cmd) // the run, or the hooks it left behind
	if hung {
		<-done
	}
	return hung
}

// TestHeadlessPromptWithPendingMail is scenario a: `claude -p` started
// with mail already pending must show it once and finish.
func TestHeadlessPromptWithPendingMail(t *testing.T) {
	t.Parallel()
	s := newSession(t, textOnly)
	sent := s.group.send(s.marker)
	hung := runBounded(t, s, "a headless -p, mail pending at start", s.claudeArgs("-p", "Say hello."), 60*time.Second)
	o := outcome{result: "passed"}
	if hung {
		o.result = "hung"
		t.Errorf("claude -p did not finish within 60 s (%d model requests); its hooks:\n%s", len(s.model.snapshot()), s.hookLines())
	}
	s.report("a headless -p, mail pending at start", sent, o)
}

// TestHeadlessWithoutPrintFlag is scenario a without -p: Claude Code runs
// headless whenever its stdout is no terminal (`claude "task" > out`), and
// then waits for its asyncRewake hooks too, so the waiter must not wait.
func TestHeadlessWithoutPrintFlag(t *testing.T) {
	t.Parallel()
	s := newSession(t, textOnly)
	sent := s.group.send(s.marker)
	o := outcome{result: "passed"}
	if runBounded(t, s, "a2 headless, output redirected, no -p", s.claudeArgs("Say hello."), 60*time.Second) {
		o.result = "hung"
		t.Errorf("claude with its output redirected did not finish within 60 s (%d model requests); its hooks:\n%s", len(s.model.snapshot()), s.hookLines())
	}
	s.report("a2 headless, output redirected, no -p", sent, o)
}

// streamClient is Claude Code in headless stream-json mode: user messages
// on stdin, events on stdout, running until stdin closes.
type streamClient struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the client has exited

	mu      sync.Mutex
	results int // "result" events: turns finished
}

func startStream(t *testing.T, s *session) *streamClient {
	cmd := s.command(s.claudeArgs("-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose")...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &streamClient{t: t, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		lines := bufio.NewScanner(stdout)
		lines.Buffer(make([]byte, 1<<20), 64<<20)
		for lines.Scan() {
			var ev struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(lines.Bytes(), &ev) == nil && ev.Type == "result" {
				c.mu.Lock()
				c.results++
				c.mu.Unlock()
			}
		}
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		kill(cmd)
		<-c.done
	})
	return c
}

// end closes the client's input, as the end of a stream-json session
// does, and checks that it exits within exitLimit and leaves no waiter.
func (c *streamClient) end(s *session, name string) {
	c.stdin.Close()
	start := time.Now()
	select {
	case <-c.done:
		c.t.Logf("RESULT %s: exited %d ms after its input closed", name, time.Since(start).Milliseconds())
	case <-time.After(exitLimit):
		c.t.Errorf("claude did not exit within %v of its input closing", exitLimit)
	}
	s.checkWaiters(name)
}

// say sends one user message.
func (c *streamClient) say(text string) {
	line, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
	if _, err := c.stdin.Write(append(line, '\n')); err != nil {
		c.t.Fatal(err)
	}
}

func (c *streamClient) turns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results
}

// waitTurns waits until n turns have finished.
func (c *streamClient) waitTurns(n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for c.turns() < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// settle waits until the model has had no request for quietPeriod, so
// that a second delivery of the same mail is seen before counting.
func (s *session) settle() {
	deadline := time.Now().Add(4 * quietPeriod)
	for time.Now().Before(deadline) {
		reqs := s.model.snapshot()
		if len(reqs) > 0 && time.Since(reqs[len(reqs)-1].at) >= quietPeriod {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHeadlessStreamMailWhileRunning is scenario b: a stream-json session
// that has finished its first turn gets mail; the model must see it once,
// without another user message.
func TestHeadlessStreamMailWhileRunning(t *testing.T) {
	t.Parallel()
	s := newSession(t, textOnly)
	c := startStream(t, s)
	c.say("Say hello.")
	if !c.waitTurns(1, startLimit) {
		t.Fatalf("the first turn did not finish within %v (%d model requests); hooks:\n%s", startLimit, len(s.model.snapshot()), s.hookLines())
	}
	time.Sleep(time.Second) // the Stop hooks, the waiter among them, start
	sent := s.group.send(s.marker)
	o := outcome{result: "passed"}
	if _, ok := s.model.waitFor(wakeLimit, s.hasMarker); !ok {
		o.result = "failed"
		t.Errorf("no model request carried the mail within %v of the send (idle session not woken); hooks:\n%s", wakeLimit, s.hookLines())
		c.say("Anything new?")
		if _, ok := s.model.waitFor(wakeLimit, s.hasMarker); ok {
			t.Logf("the mail reached the model with the next user message")
		}
	}
	s.settle()
	// Three hook runs armed a waiter (session start, two stops): one runs.
	if n := s.waitersLeft(0); n != 1 {
		t.Errorf("%d crosstalk-mcp wait processes run for the session; want 1", n)
	}
	s.report("b headless stream-json, mail while running", sent, o)
	c.end(s, "b headless stream-json, mail while running")
}

// newWaitingSession is a session whose model first calls wait_for_messages
// for seconds, then answers "Done.".
func newWaitingSession(t *testing.T, seconds int) *session {
	var s *session
	s = newSession(t, func(n int, r modelRequest) modelReply {
		if n == 0 {
			return modelReply{toolName: "mcp__crosstalk__wait_for_messages", toolInput: s.group.waitArgs(seconds)}
		}
		return modelReply{text: "Done."}
	})
	return s
}

// TestModelWaitsForMessages is scenario c: the model calls
// wait_for_messages and the mail arrives 3 s later; the tool's result
// must carry it, and nothing else again.
func TestModelWaitsForMessages(t *testing.T) {
	t.Parallel()
	s := newWaitingSession(t, 30)
	c := startStream(t, s)
	c.say("Wait for a Crosstalk message.")
	if _, ok := s.model.waitFor(startLimit, func(r modelRequest) bool { return r.main }); !ok {
		t.Fatalf("no model request within %v; hooks:\n%s", startLimit, s.hookLines())
	}
	time.Sleep(3 * time.Second)
	sent := s.group.send(s.marker)
	o := outcome{result: "passed"}
	if _, ok := s.model.waitFor(wakeLimit, s.hasMarker); !ok {
		o.result = "failed"
		t.Errorf("no model request carried the mail within %v of the send", wakeLimit)
	}
	s.settle()
	if !strings.Contains(s.resultOf("mcp__crosstalk__wait_for_messages"), s.marker) {
		t.Errorf("wait_for_messages's result did not carry the mail")
	}
	s.report("c model calls wait_for_messages", sent, o)
	c.end(s, "c model calls wait_for_messages")
}

// newSessionMailedAtFirstRequest returns a session whose model, when first
// asked, has the group send the session's marker, reporting the time on
// sentAt, and otherwise only answers "Done.".
func newSessionMailedAtFirstRequest(t *testing.T) (*session, <-chan time.Time) {
	sentAt := make(chan time.Time, 1)
	var s *session
	s = newSession(t, func(n int, r modelRequest) modelReply {
		if n == 0 {
			sentAt <- s.group.send(s.marker)
		}
		return modelReply{text: "Done."}
	})
	return s, sentAt
}

// TestStopWithMailPending is scenario d: mail arrives while the model
// works on its turn of a stream-json session; it must reach the model
// once. The Stop hook or the waiter armed at session start may deliver it
// (the run passes with the Stop hook removed): d2 pins the Stop path.
func TestStopWithMailPending(t *testing.T) {
	t.Parallel()
	s, sentAt := newSessionMailedAtFirstRequest(t)
	c := startStream(t, s)
	c.say("Say hello.")
	o := outcome{result: "passed"}
	if _, ok := s.model.waitFor(startLimit, s.hasMarker); !ok {
		o.result = "failed"
		t.Errorf("no model request carried the mail within %v; hooks:\n%s", startLimit, s.hookLines())
	}
	s.settle()
	sent := sentBy(sentAt)
	s.report("d Stop with mail pending", sent, o)
	c.end(s, "d Stop with mail pending")
}

// TestHeadlessStopWithMailPending is scenario d under `claude -p`, where
// no waiter runs, so that only the Stop hook can deliver: it must block
// once with its notice, the model's get_unread_messages must carry the
// mail, and the next Stop must let the run end (three model requests, no
// loop). In the stream-json scenario d a waiter could deliver instead.
func TestHeadlessStopWithMailPending(t *testing.T) {
	t.Parallel()
	s, sentAt := newSessionMailedAtFirstRequest(t)
	o := outcome{result: "passed"}
	if runBounded(t, s, "d2 headless -p, Stop with mail pending", s.claudeArgs("-p", "Say hello."), 60*time.Second) {
		o.result = "hung"
		t.Errorf("claude -p did not finish within 60 s (%d model requests); its hooks:\n%s", len(s.model.snapshot()), s.hookLines())
	}
	if got := s.resultOf("mcp__crosstalk__get_unread_messages"); !strings.Contains(got, s.marker) {
		t.Errorf("no get_unread_messages the Stop notice asked for carried the mail (%.300s); hooks:\n%s", got, s.hookLines())
	}
	if d := s.model.delivered(s.marker); len(d.perMain) != 3 {
		t.Errorf("marker per main request %v; want 3 requests: the turn, the read the Stop notice asks for, its answer", d.perMain)
	}
	sent := sentBy(sentAt)
	s.report("d2 headless -p, Stop with mail pending", sent, o)
}

// TestInteractiveIdleWake is scenario e: an interactive session in a
// terminal sits idle after its first turn; mail for it must reach the
// model without anyone typing.
func TestInteractiveIdleWake(t *testing.T) {
	t.Parallel()
	s := newSession(t, textOnly)
	cmd := s.command(s.claudeArgs()...)
	cmd.SysProcAttr = nil // startInTerminal makes it a session leader
	term, err := startInTerminal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill(cmd)
		term.close()
		cmd.Wait()
	})
	if !waitScreen(term, "bypass permissions on", startLimit) {
		t.Fatalf("the prompt did not appear within %v; screen: %q", startLimit, tail(term.output()))
	}
	time.Sleep(time.Second) // the input box takes keys once drawn
	term.typeText("Say hello.")
	time.Sleep(300 * time.Millisecond)
	term.typeText("\r")
	if _, ok := s.model.waitFor(startLimit, func(r modelRequest) bool { return r.main }); !ok {
		t.Fatalf("no model request within %v of the prompt; screen: %q", startLimit, tail(term.output()))
	}
	s.settle() // the turn ends and the Stop hooks re-arm the waiter
	sent := s.group.send(s.marker)
	o := outcome{result: "passed"}
	if _, ok := s.model.waitFor(wakeLimit, s.hasMarker); !ok {
		o.result = "failed"
		t.Errorf("no model request carried the mail within %v of the send (idle session not woken); hooks:\n%s", wakeLimit, s.hookLines())
	}
	s.settle()
	s.report("e interactive idle wake", sent, o)
	// The terminal closing ends Claude Code alone; its waiter must see
	// that by itself.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s.checkWaiters("e interactive idle wake")
}

func waitScreen(term *terminal, text string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for !strings.Contains(term.output(), text) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func tail(s string) string { return s[max(0, len(s)-2000):] }

// TestResumeDeliversOnce is scenario f: mail a `claude -p` run showed must
// not be shown again when `claude --resume` continues that session, whose
// SessionStart and UserPromptSubmit hooks run again for the same context.
func TestResumeDeliversOnce(t *testing.T) {
	t.Parallel()
	s := newSession(t, textOnly)
	sent := s.group.send(s.marker)
	o := outcome{result: "passed"}
	if runBounded(t, s, "f the first -p", s.claudeArgs("-p", "Say hello."), 60*time.Second) {
		o.result = "hung"
		t.Errorf("claude -p did not finish within 60 s")
	}
	first := len(s.model.snapshot())
	resume := []string{"--resume", s.id, "--dangerously-skip-permissions", "--debug-file", s.debugLog(), "-p", "Again."}
	if runBounded(t, s, "f --resume -p", resume, 60*time.Second) {
		o.result = "hung"
		t.Errorf("claude --resume -p did not finish within 60 s")
	}
	if len(s.model.snapshot()) == first {
		t.Errorf("claude --resume made no model request")
	}
	s.report("f --resume after a -p that showed the mail", sent, o)
}

// TestKilledTurnShownOnResume is scenario g: a hook shows the mail, then
// Claude Code is killed while the model request carrying it is still
// unanswered, so that turn never ran. The mail is not lost: Claude Code
// writes the hook's output to the session transcript before the request,
// and `claude --resume` replays it, so the marker reaches the model exactly
// once across the answered requests, without the hooks showing it again.
func TestKilledTurnShownOnResume(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var s *session
	s = newSession(t, func(_ int, r modelRequest) modelReply {
		if strings.Contains(string(r.body), s.marker) {
			held := false
			once.Do(func() { held = true; close(arrived) })
			if held {
				<-release // never answered: the client is killed meanwhile
			}
		}
		return modelReply{text: "Done."}
	})
	sent := s.group.send(s.marker)
	cmd := s.command(s.claudeArgs("-p", "Say hello.")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(startLimit):
		kill(cmd)
		t.Fatalf("no model request carried the marker within %v", startLimit)
	}
	killed := len(s.model.snapshot())
	// Claude Code flushes its transcript asynchronously, within moments of
	// the request; a kill inside that window would lose the hook's output.
	held, start := false, time.Now()
	for !held && time.Since(start) < wakeLimit {
		time.Sleep(20 * time.Millisecond)
		transcripts, _ := filepath.Glob(filepath.Join(s.home, ".claude", "projects", "*", s.id+".jsonl"))
		for _, f := range transcripts {
			b, _ := os.ReadFile(f)
			held = held || strings.Contains(string(b), s.marker)
		}
	}
	t.Logf("RESULT g: transcript held the marker %v, %d ms after its request arrived unanswered", held, time.Since(start).Milliseconds())
	kill(cmd)
	cmd.Wait()
	close(release)
	o := outcome{result: "passed"}
	resume := []string{"--resume", s.id, "--dangerously-skip-permissions", "--debug-file", s.debugLog(), "-p", "Again."}
	if runBounded(t, s, "g --resume -p", resume, 60*time.Second) {
		o.result = "hung"
		t.Errorf("claude --resume -p did not finish within 60 s")
	}
	answered := s.model.snapshot()[killed:]
	n := 0
	for _, r := range answered {
		if r.main {
			n = max(n, strings.Count(string(r.body), s.marker))
		}
	}
	t.Logf("RESULT g killed mid-request, then --resume: marker count %d in the %d answered requests", n, len(answered))
	if n != 1 {
		t.Errorf("after the kill, the resumed run's requests carry the marker %d times; want exactly 1", n)
	}
	if !held {
		s.report("g killed mid-request, then --resume", sent, o) // shows what the model saw
	}
}

// TestHeadlessStreamInputClosedMidTurn is scenario j: a stream-json
// session's input closes during a turn, as an SDK host's may right after
// its last message. Claude Code finishes the turn, whose Stop hooks arm a
// waiter as it closes its stdio server: the waiter may take its slot
// after the server has ended, and must still end, so that the client exits
// within exitLimit, not 30 s later.
func TestHeadlessStreamInputClosedMidTurn(t *testing.T) {
	t.Parallel()
	s := newWaitingSession(t, 1)
	c := startStream(t, s)
	c.say("Wait a second for a Crosstalk message.")
	if !s.model.waitMains(1, startLimit) {
		t.Fatalf("no model request within %v; hooks:\n%s", startLimit, s.hookLines())
	}
	c.end(s, "j input closed during a turn")
	if c.turns() != 1 {
		t.Errorf("%d turns finished; want the one under way when the input closed", c.turns())
	}
}

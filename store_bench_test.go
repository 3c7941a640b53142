package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// loadAgent is one server process driven over its stdio pipes by a load
// benchmark: the driver writes request lines and reads answers, skipping
// notifications, without the e2e client's bookkeeping.
type loadAgent struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startLoadAgent starts bin as a stdio server on dir with extra
// environment env, and initializes it.
func startLoadAgent(tb testing.TB, bin, dir string, env ...string) *loadAgent {
	tb.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	a := &loadAgent{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	a.write(tb, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	a.response(tb)
	return a
}

func (a *loadAgent) write(tb testing.TB, s string) {
	if _, err := io.WriteString(a.in, s); err != nil {
		tb.Errorf("write request: %v", err)
	}
}

// response returns the next answer line, skipping notifications.
func (a *loadAgent) response(tb testing.TB) []byte {
	for {
		line, err := a.out.ReadBytes('\n')
		if err != nil {
			tb.Fatalf("read answer: %v", err)
		}
		if !bytes.HasPrefix(line, []byte(`{"jsonrpc": "2.0", "method": `)) {
			return line
		}
	}
}

// stop closes stdin and waits for the process to exit.
func (a *loadAgent) stop(tb testing.TB) {
	a.in.Close()
	io.Copy(io.Discard, a.out)
	if err := a.cmd.Wait(); err != nil {
		tb.Errorf("server exit: %v", err)
	}
}

// sendOK reports whether line is a successful tools/call answer, without
// decoding it.
func sendOK(line []byte) bool {
	return !bytes.Contains(line, []byte(`\"error\"`)) && bytes.HasSuffix(bytes.TrimSpace(line), []byte(`"isError": false}}`))
}

// loadResult is what one load run measured.
type loadResult struct {
	rate          float64 // acknowledged sends per second of wall time
	p50, p99, max time.Duration
	errors        int
	lost          int // acknowledged but not stored afterwards
}

func (r loadResult) String() string {
	return fmt.Sprintf("%7.0f msg/s  p50 %5.2f ms  p99 %6.2f ms  max %6.2f ms  errors %d  lost %d",
		r.rate, float64(r.p50)/1e6, float64(r.p99)/1e6, float64(r.max)/1e6, r.errors, r.lost)
}

// loadGroup is procs server processes of bin on a fresh directory, each
// joined to one group as its own member.
type loadGroup struct {
	dir, id string
	agents  []*loadAgent
}

func startLoadGroup(tb testing.TB, bin string, procs int) loadGroup {
	tb.Helper()
	dir := tb.TempDir()
	agents := make([]*loadAgent, procs)
	for i := range agents {
		// The senders subscribe to nothing; the poller is measured by
		// BenchmarkIdlePoll.
		agents[i] = startLoadAgent(tb, bin, dir, "CROSSTALK_POLL_INTERVAL_SECONDS=3600")
	}
	agents[0].write(tb, toolLine(1, "create_group", map[string]any{"context_id": "agent0", "name": "load"}))
	var g struct {
		GroupID string `json:"group_id"`
	}
	json.Unmarshal([]byte(mustSucceed(tb, agents[0].response(tb))), &g)
	for i, a := range agents {
		a.write(tb, toolLine(2, "join_group", map[string]any{"group_id": g.GroupID, "context_id": fmt.Sprintf("agent%d", i), "name": fmt.Sprintf("agent%d", i)}))
		mustSucceed(tb, a.response(tb))
	}
	return loadGroup{dir: dir, id: g.GroupID, agents: agents}
}

// sendLine is agent i's j-th send_message request.
func (g loadGroup) sendLine(i, j int) string {
	return toolLine(100+j, "send_message", map[string]any{"group_id": g.id,
		"context_id": fmt.Sprintf("agent%d", i), "name": fmt.Sprintf("agent%d", i), "message": benchText(j)})
}

// finish stops the agents and returns lat's figures, with lost counted
// against the messages stored.
func (g loadGroup) finish(tb testing.TB, lat []time.Duration, acked, errs int, elapsed time.Duration) loadResult {
	tb.Helper()
	for _, a := range g.agents {
		a.stop(tb)
	}
	var stored int
	db := openTestDB(tb, groupFile(g.dir, g.id), "ro")
	if err := db.QueryRow("SELECT COUNT(*) FROM messages").Scan(&stored); err != nil {
		tb.Fatal(err)
	}
	slices.Sort(lat)
	return loadResult{
		rate:   float64(acked) / elapsed.Seconds(),
		p50:    lat[len(lat)/2],
		p99:    lat[len(lat)*99/100],
		max:    lat[len(lat)-1],
		errors: errs,
		lost:   max(0, acked-stored),
	}
}

// burstGap is the time between the rounds of runBurst: long enough for a
// round's sends to be answered before the next, so that no round starts
// behind a backlog.
const burstGap = 60 * time.Millisecond

// runBurst has procs server processes send one message each at the same
// instant, rounds times, burstGap apart, and returns the figures of each
// round's last answer (from the instant to the answer): how long the agent
// that waits longest waits when every agent sends at once.
func runBurst(tb testing.TB, bin string, procs, rounds int) loadResult {
	tb.Helper()
	g := startLoadGroup(tb, bin, procs)
	last := make([]time.Duration, rounds)
	var mu sync.Mutex
	acked, errs := 0, 0
	var wg sync.WaitGroup
	start := time.Now().Add(burstGap)
	for i, a := range g.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				at := start.Add(time.Duration(r) * burstGap)
				time.Sleep(time.Until(at))
				a.write(tb, g.sendLine(i, r))
				line := a.response(tb)
				took := time.Since(at)
				mu.Lock()
				last[r] = max(last[r], took)
				if sendOK(line) {
					acked++
				} else {
					errs++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return g.finish(tb, last, acked, errs, time.Since(start))
}

// runLoad starts procs server processes of bin on a fresh directory, joins
// each to one group as its own member, and has each send perProc messages:
// pipelined (all written before any answer is read) or one at a time (each
// written after the previous answer). One at a time with pace > 0, each
// process sends every pace (open loop, the processes' phases spread over
// one pace), as agents do, instead of as soon as it is answered (closed
// loop, where latency is procs / throughput by Little's law whatever the
// server does). Latency is from writing a request to reading its answer.
func runLoad(tb testing.TB, bin string, procs, perProc int, pipelined bool, pace time.Duration) loadResult {
	tb.Helper()
	g := startLoadGroup(tb, bin, procs)
	var mu sync.Mutex
	var latencies []time.Duration
	acked, errs := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range g.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, perProc)
			ok, bad := 0, 0
			if pipelined {
				sentAt := make([]time.Time, perProc)
				go func() {
					for j := range perProc {
						sentAt[j] = time.Now()
						a.write(tb, g.sendLine(i, j))
					}
				}()
				for j := range perProc {
					line := a.response(tb)
					lat = append(lat, time.Since(sentAt[j]))
					if sendOK(line) {
						ok++
					} else {
						bad++
					}
				}
			} else {
				for j := range perProc {
					if pace > 0 {
						time.Sleep(time.Until(start.Add(time.Duration(i)*pace/time.Duration(procs) + time.Duration(j)*pace)))
					}
					t0 := time.Now()
					a.write(tb, g.sendLine(i, j))
					line := a.response(tb)
					lat = append(lat, time.Since(t0))
					if sendOK(line) {
						ok++
					} else {
						bad++
					}
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			acked += ok
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	return g.finish(tb, latencies, acked, errs, time.Since(start))
}

// rawCommitRate commits n single-row INSERTs, one per transaction, into a
// fresh WAL database opened with the store's DSN (so the same synchronous
// setting), and returns commits per second: the disk's floor for a send.
func rawCommitRate(tb testing.TB, n int) float64 {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "raw.sqlite3")
	db, err := sql.Open("sqlite", sqliteDSN(path, "rwc"))
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{"PRAGMA journal_mode=WAL", "CREATE TABLE t (id INTEGER PRIMARY KEY, content TEXT NOT NULL)"} {
		if _, err := db.Exec(q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	start := time.Now()
	for i := range n {
		if _, err := db.Exec("INSERT INTO t(content) VALUES (?)", benchText(i)); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkSendLoad runs the send workloads through real server
// processes, each iteration next to a raw single-row commit on the same
// disk, and reports the send rate as a ratio of it (x_raw). With
// CROSSTALK_BENCH_BEFORE naming another build of the server, every
// iteration also runs that build in between, so the two are compared under
// the same load from the rest of the machine (x_before). The paced
// workload sends at a fixed rate, so its msg/s is set by the driver and
// its p99 is the figure to read. The burst workload (runBurst) reports the
// p99 and max of each round's last answer instead of every send's. Run it
// with -benchtime=3x or more: each iteration is a whole workload.
//
//	go test -run '^$' -bench SendLoad -benchtime=3x .
func BenchmarkSendLoad(b *testing.B) {
	for _, w := range []struct {
		name           string
		procs, perProc int
		pipelined      bool
		pace           time.Duration
		burst          bool
	}{
		{"pipelined-1proc", 1, 4000, true, 0, false},
		{"oneatatime-4procs", 4, 400, false, 0, false},
		{"oneatatime-8procs", 8, 250, false, 0, false},
		// 8 agents sending 20 messages a second each, about half of what
		// the group takes one at a time on a 2-core VM.
		{"paced-8procs-20pers", 8, 100, false, 50 * time.Millisecond, false},
		// 8 agents sending at the same instant, 200 rounds.
		{"burst-8procs", 8, 200, false, 0, true},
	} {
		b.Run(w.name, func(b *testing.B) {
			bin := builtBinary(b)
			before := os.Getenv("CROSSTALK_BENCH_BEFORE")
			run := func(bin string) loadResult {
				if w.burst {
					return runBurst(b, bin, w.procs, w.perProc)
				}
				return runLoad(b, bin, w.procs, w.perProc, w.pipelined, w.pace)
			}
			var after, prior, raw []float64
			var p99s, p99sBefore, maxes, maxesBefore []float64
			for range b.N {
				// Raw commits before and after the run, averaged, so that a
				// burst of load elsewhere on the machine skews both sides alike.
				r := rawCommitRate(b, 300)
				a := run(bin)
				r = (r + rawCommitRate(b, 300)) / 2
				line := fmt.Sprintf("raw %5.0f/s | this: %s (%.2f× raw)", r, a, a.rate/r)
				raw, after, p99s, maxes = append(raw, r), append(after, a.rate), append(p99s, float64(a.p99)/1e6), append(maxes, float64(a.max)/1e6)
				if a.errors > 0 || a.lost > 0 {
					b.Errorf("%d errors, %d lost", a.errors, a.lost)
				}
				if before != "" {
					p := run(before)
					prior, p99sBefore, maxesBefore = append(prior, p.rate), append(p99sBefore, float64(p.p99)/1e6), append(maxesBefore, float64(p.max)/1e6)
					line += fmt.Sprintf(" | before: %s (%.2f× raw, after/before %.2f)", p, p.rate/r, a.rate/p.rate)
				}
				b.Log(line)
			}
			b.ReportMetric(median(after), "msg/s")
			b.ReportMetric(median(p99s), "p99_ms")
			b.ReportMetric(median(maxes), "max_ms")
			b.ReportMetric(median(ratios(after, raw)), "x_raw")
			if before != "" {
				b.ReportMetric(median(prior), "before_msg/s")
				b.ReportMetric(median(p99sBefore), "before_p99_ms")
				b.ReportMetric(median(maxesBefore), "before_max_ms")
				b.ReportMetric(median(ratios(after, prior)), "x_before")
			}
			b.Logf("ranges: msg/s %s, p99 ms %s, raw/s %s", span(after), span(p99s), span(raw))
			if before != "" {
				b.Logf("before ranges: msg/s %s, p99 ms %s", span(prior), span(p99sBefore))
			}
		})
	}
}

// ratios divides a by b element by element.
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

// span renders the range of v as "min–max".
func span(v []float64) string {
	s := slices.Clone(v)
	sort.Float64s(s)
	format := func(f float64) string {
		if f >= 100 {
			return fmt.Sprintf("%.0f", f)
		}
		return strings.TrimSuffix(fmt.Sprintf("%.2f", f), ".00")
	}
	return format(s[0]) + "–" + format(s[len(s)-1])
}

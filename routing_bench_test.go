package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// seedIdleGroups creates count groups in a new directory through the store
// (the real schema), each with member "agent", and returns the directory.
func seedIdleGroups(tb testing.TB, count int) (string, []string) {
	tb.Helper()
	dir := tb.TempDir()
	st := newTestStore(tb, dir)
	ids := make([]string, count)
	for i := range ids {
		meta, err := st.createGroup("agent", fmt.Sprintf("idle %d", i), "")
		if err != nil {
			tb.Fatal(err)
		}
		if err := st.joinGroup(meta.groupID, "agent", "agent"); err != nil {
			tb.Fatal(err)
		}
		ids[i] = meta.groupID
	}
	st.close()
	return dir, ids
}

// copyGroupsDir copies every regular file of src into a new directory, so
// that each server measured starts from the same files.
func copyGroupsDir(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			copyFile(tb, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		}
	}
	return dst
}

// processCPU returns the user plus system CPU time a process has used so
// far, from /proc.
func processCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the parenthesized command name; utime and stime are the
	// 14th and 15th fields of the line, in clock ticks (100 per second).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// idleCPU starts bin on a copy of dir, joins and subscribes to every group
// (its messages and the member's wakeups, as an agent does), lets it settle,
// and returns the share of one core it uses over window while nothing is
// written.
func idleCPU(tb testing.TB, bin, dir string, ids []string, window time.Duration) float64 {
	tb.Helper()
	// The default poll interval is what the target is about; any extra
	// environment (such as a switch for the change watcher) comes from
	// CROSSTALK_BENCH_ENV, space-separated NAME=value.
	a := startLoadAgent(tb, bin, copyGroupsDir(tb, dir), strings.Fields(os.Getenv("CROSSTALK_BENCH_ENV"))...)
	defer a.stop(tb)
	for i, g := range ids {
		a.write(tb, toolLine(10+i, "join_group", map[string]any{"group_id": g, "context_id": "agent", "name": "agent"}))
		mustSucceed(tb, a.response(tb))
		for _, uri := range []string{groupURI(g), wakeupURI(g, "agent")} {
			a.write(tb, fmt.Sprintf(`{"jsonrpc":"2.0","id":"s%d","method":"resources/subscribe","params":{"uri":%q}}`+"\n", i, uri))
			if line := a.response(tb); !strings.Contains(string(line), `"result": {}`) && !strings.Contains(string(line), `"result":{}`) {
				tb.Fatalf("subscribe %s: got %s", uri, line)
			}
		}
	}
	time.Sleep(2 * time.Second) // the first polls after subscribing read every group once
	pid := a.cmd.Process.Pid
	c0, t0 := processCPU(tb, pid), time.Now()
	time.Sleep(window)
	return float64(processCPU(tb, pid)-c0) / float64(time.Since(t0))
}

// BenchmarkIdlePoll measures the CPU a server uses at the default poll
// interval while 100 or 1,000 subscribed groups stay unchanged, as a share
// of one core (the original used 5.2% and 32%). CROSSTALK_BENCH_BEFORE adds
// an interleaved run of another build, as in BenchmarkSendLoad.
//
//	go test -run '^$' -bench IdlePoll -benchtime=3x .
func BenchmarkIdlePoll(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads process CPU time from /proc")
	}
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("%dgroups", n), func(b *testing.B) {
			bin := builtBinary(b)
			before := os.Getenv("CROSSTALK_BENCH_BEFORE")
			dir, ids := seedIdleGroups(b, n)
			var after, prior []float64
			for range b.N {
				a := idleCPU(b, bin, dir, ids, 10*time.Second)
				after = append(after, 100*a)
				line := fmt.Sprintf("this: %.2f%% of a core", 100*a)
				if before != "" {
					p := idleCPU(b, before, dir, ids, 10*time.Second)
					prior = append(prior, 100*p)
					line += fmt.Sprintf(" | before: %.2f%%", 100*p)
				}
				b.Log(line)
			}
			b.ReportMetric(median(after), "%core")
			b.Logf("range %s%%", span(after))
			if before != "" {
				b.ReportMetric(median(prior), "before_%core")
				b.Logf("before range %s%%", span(prior))
			}
		})
	}
}

// busyWatchers has 8 server processes of bin, each joined to one group and
// subscribed to its wakeups and the group's changes (as agents are), send
// 100 messages each at 20 a second, each mentioning the next member, and
// returns the sends' p99 in milliseconds and the processes' CPU as a share
// of one core: what the change watcher costs the members of a busy group.
func busyWatchers(tb testing.TB, bin string) (p99, cpu float64) {
	tb.Helper()
	const procs, perProc, pace = 8, 100, 50 * time.Millisecond
	dir := tb.TempDir()
	agents := make([]*loadAgent, procs)
	for i := range agents {
		agents[i] = startLoadAgent(tb, bin, dir)
	}
	agents[0].write(tb, toolLine(1, "create_group", map[string]any{"context_id": "agent0", "name": "busy"}))
	var g struct {
		GroupID string `json:"group_id"`
	}
	json.Unmarshal([]byte(mustSucceed(tb, agents[0].response(tb))), &g)
	for i, a := range agents {
		id := fmt.Sprintf("agent%d", i)
		a.write(tb, toolLine(2, "join_group", map[string]any{"group_id": g.GroupID, "context_id": id, "name": id}))
		mustSucceed(tb, a.response(tb))
		for _, uri := range []string{groupURI(g.GroupID), wakeupURI(g.GroupID, id)} {
			a.write(tb, fmt.Sprintf(`{"jsonrpc":"2.0","id":"s","method":"resources/subscribe","params":{"uri":%q}}`+"\n", uri))
			a.response(tb)
		}
	}
	cpuNow := func() (sum time.Duration) {
		for _, a := range agents {
			sum += processCPU(tb, a.cmd.Process.Pid)
		}
		return sum
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	c0, start := cpuNow(), time.Now()
	for i, a := range agents {
		wg.Go(func() {
			for j := range perProc {
				time.Sleep(time.Until(start.Add(time.Duration(i)*pace/procs + time.Duration(j)*pace)))
				t0 := time.Now()
				a.write(tb, toolLine(100+j, "send_message", map[string]any{"group_id": g.GroupID, "context_id": fmt.Sprintf("agent%d", i),
					"name": fmt.Sprintf("agent%d", i), "message": fmt.Sprintf("@agent%d %s", (i+1)%procs, benchText(j))}))
				if line := a.response(tb); !sendOK(line) {
					tb.Errorf("send: %s", line)
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	cpu = float64(cpuNow()-c0) / float64(time.Since(start))
	for _, a := range agents {
		a.stop(tb)
	}
	slices.Sort(lat)
	return float64(lat[len(lat)*99/100].Microseconds()) / 1000, 100 * cpu
}

// BenchmarkBusyWatchers reports busyWatchers' send p99 and CPU, with
// CROSSTALK_BENCH_BEFORE interleaved as in BenchmarkSendLoad.
//
//	go test -run '^$' -bench BusyWatchers -benchtime=5x .
func BenchmarkBusyWatchers(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads process CPU time from /proc")
	}
	bin, before := builtBinary(b), os.Getenv("CROSSTALK_BENCH_BEFORE")
	var p99s, cpus, p99sBefore, cpusBefore []float64
	for range b.N {
		p, c := busyWatchers(b, bin)
		p99s, cpus = append(p99s, p), append(cpus, c)
		line := fmt.Sprintf("this: p99 %.2f ms, %.1f%% of a core", p, c)
		if before != "" {
			p, c := busyWatchers(b, before)
			p99sBefore, cpusBefore = append(p99sBefore, p), append(cpusBefore, c)
			line += fmt.Sprintf(" | before: p99 %.2f ms, %.1f%%", p, c)
		}
		b.Log(line)
	}
	b.ReportMetric(median(p99s), "p99_ms")
	b.ReportMetric(median(cpus), "%core")
	if before != "" {
		b.ReportMetric(median(p99sBefore), "before_p99_ms")
		b.ReportMetric(median(cpusBefore), "before_%core")
	}
}

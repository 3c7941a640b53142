package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// reportPercentiles adds p50 and p99 of samples, in milliseconds, as
// metrics named with prefix.
func reportPercentiles(b *testing.B, prefix string, samples []time.Duration) {
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), prefix+"p50-ms")
	b.ReportMetric(at(0.99), prefix+"p99-ms")
}

// BenchmarkWakeupLatency measures, between two server processes, the time
// from a send_message answer in one to the wakeup notification in the
// other: with file events, and with the original's 0.5 s polling. The
// random pause between sends and the woken member's read are not part of
// the time reported.
func BenchmarkWakeupLatency(b *testing.B) {
	for _, mode := range []struct{ name, env string }{{"events", "CROSSTALK_FILE_EVENTS=on"}, {"poll0.5s", "CROSSTALK_FILE_EVENTS=off"}} {
		b.Run(mode.name, func(b *testing.B) {
			dir := b.TempDir()
			a := startSession(b, "A", dir, mode.env)
			s := startSession(b, "S", dir, mode.env)
			gid := s.createGroup("sender")
			s.join(gid, "sender", "sender")
			uri := a.join(gid, "ctx-a", "alice")
			var samples []time.Duration
			for i := 0; i < b.N; i++ {
				// A random pause puts sends at random phases of the poll.
				time.Sleep(rand.N(500 * time.Millisecond))
				before := len(a.notifications(uri))
				s.ok("send_message", map[string]any{"group_id": gid, "context_id": "sender", "name": "sender", "message": fmt.Sprintf("@alice %d", i)}, nil)
				answered := time.Now()
				for len(a.notifications(uri)) == before {
					a.mu.Lock()
					changed := a.changed
					a.mu.Unlock()
					if len(a.notifications(uri)) != before {
						break
					}
					select {
					case <-changed:
					case <-time.After(e2eTimeout):
						b.Fatal("no notification")
					}
				}
				samples = append(samples, time.Since(answered))
				// Alice reads, as an agent woken does: a wakeup subscription
				// whose member has not read since its last notification
				// waits wakeupRenotifyGap before notifying again.
				a.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, nil)
			}
			reportPercentiles(b, "", samples)
		})
	}
}

// BenchmarkIdleSession100Groups measures the CPU a server process uses
// while idle with wakeup subscriptions in 100 groups, over 10 s.
func BenchmarkIdleSession100Groups(b *testing.B) {
	for _, mode := range []struct{ name, env string }{{"events", "CROSSTALK_FILE_EVENTS=on"}, {"poll0.5s", "CROSSTALK_FILE_EVENTS=off"}} {
		b.Run(mode.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				dir := b.TempDir()
				p := startSession(b, "idle", dir, mode.env)
				for range 100 {
					p.join(p.createGroup("idle"), "idle", "idle")
				}
				time.Sleep(500 * time.Millisecond)
				cpu0 := processCPU(b, p.cmd.Process.Pid)
				time.Sleep(10 * time.Second)
				cpu := processCPU(b, p.cmd.Process.Pid) - cpu0
				b.ReportMetric(100*cpu.Seconds()/10, "%core")
				p.close()
			}
		})
	}
}

// BenchmarkHookNothingPending runs the built binary as a UserPromptSubmit
// hook for a member of ten groups with nothing unread, in a directory of 10
// or 300 groups, none of them held open by a server. With
// CROSSTALK_BENCH_BEFORE naming another build, each run of this one is
// followed by a run of that one (before-p50-ms, before-p99-ms).
//
//	go test -run '^$' -bench HookNothingPending -benchtime=40x .
func BenchmarkHookNothingPending(b *testing.B) {
	for _, groups := range []int{10, 300} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			dir := b.TempDir()
			st := newTestStore(b, dir)
			for i := range groups {
				members := []string{"x"}
				if i%(groups/10) == 0 {
					members = append(members, "sess")
				}
				newTestGroup(b, st, "g", members...)
			}
			st.close() // no server holds the groups open
			hook := func(bin string) time.Duration {
				cmd := exec.Command(bin, "hook", "--client", "claude-code")
				cmd.Env = []string{"CROSSTALK_GROUPS_DIR=" + dir}
				cmd.Stdin = strings.NewReader(`{"session_id": "sess", "hook_event_name": "UserPromptSubmit"}`)
				start := time.Now()
				out, err := cmd.Output()
				if err != nil || len(out) != 0 {
					b.Fatalf("hook: %v, %q", err, out)
				}
				return time.Since(start)
			}
			bin, before := builtBinary(b), os.Getenv("CROSSTALK_BENCH_BEFORE")
			var samples, samplesBefore []time.Duration
			for range b.N {
				samples = append(samples, hook(bin))
				if before != "" {
					samplesBefore = append(samplesBefore, hook(before))
				}
			}
			reportPercentiles(b, "", samples)
			if before != "" {
				reportPercentiles(b, "before-", samplesBefore)
			}
		})
	}
}

package main

import (
	"bufio"
	"database/sql"
	"fmt"
	"net/http"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// raceEnabled reports whether the race detector instruments this binary;
// timing budgets only make sense without it.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// seedLoad builds the benchmark deployment quickly with set-based SQL:
// groups × messages per group (with unread rows, metrics and wake events)
// and audit rows with all four rollup tiers. It is long because it is one
// SQL script per database, kept together so the load is read in one place.
func seedLoad(tb testing.TB, groups, perGroup, auditRows int) (*observeFixture, []string) {
	tb.Helper()
	fx := newObserveFixture(tb)
	base := time.Now().Add(-time.Duration(perGroup+10) * time.Minute).Unix()
	fx.enableAudit(time.Unix(base, 0))
	members := []fixtureMember{{"ctx0", "Member zero"}, {"ctx1", "Member one"}, {"ctx2", "Member two"}}
	var ids []string
	for g := 0; g < groups; g++ {
		id := fx.group(fmt.Sprintf("Load group %02d", g), "Benchmark group", time.Unix(base, 0), members...)
		ids = append(ids, id)
		fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
			stmts := []string{
				`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
				 INSERT INTO messages(sender_context_id, sender_name, content, created_at, priority, routing_reason)
				 SELECT 'ctx' || (i % 3), 'Member ' || (i % 3), 'Status update ' || i || ': the build is green and the release notes are drafted for review.',
				        strftime('%Y-%m-%dT%H:%M:%S+00:00', ? + i * 60 + ?, 'unixepoch'), CASE i % 4 WHEN 0 THEN 'high' ELSE 'normal' END, 'fallback' FROM n`,
				`INSERT INTO group_message_metrics(metric, value, count) SELECT 'priority', priority, COUNT(*) FROM messages GROUP BY priority`,
				`INSERT INTO group_message_metrics(metric, value, count) SELECT 'routing', routing_reason, COUNT(*) FROM messages GROUP BY routing_reason`,
				`INSERT INTO member_unread_messages(context_id, message_id) SELECT 'ctx1', id FROM messages WHERE id > (SELECT MAX(id) - 40 FROM messages)`,
				`UPDATE group_members SET unread_count = 40 WHERE context_id = 'ctx1'`,
				`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
				 INSERT INTO wakeup_events(message_id, context_id, relevance, priority, created_at, acknowledged_at, last_notified_at)
				 SELECT i * 20, 'ctx2', 'mention', 'high', strftime('%Y-%m-%dT%H:%M:%S+00:00', ? + i * 1200, 'unixepoch'),
				        CASE WHEN i % 10 = 0 THEN NULL ELSE strftime('%Y-%m-%dT%H:%M:%S+00:00', ? + i * 1200 + 30, 'unixepoch') END,
				        strftime('%Y-%m-%dT%H:%M:%S+00:00', ? + i * 1200, 'unixepoch') FROM n`,
				`UPDATE group_state SET message_revision = message_revision + 1, wakeup_revision = wakeup_revision + 1`,
			}
			args := [][]any{{perGroup, base, g}, nil, nil, nil, nil, {base, base, base}, nil}
			for i, s := range stmts {
				if _, err := tx.Exec(s, args[i]...); err != nil {
					return fmt.Errorf("seed statement %d: %w", i, err)
				}
			}
			return nil
		})
	}
	fx.exec(catalogFileName, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO tool_calls(occurred_at, audit_request_id, tool_name, group_id, context_id, name, outcome, duration_ms, error_category)
			SELECT strftime('%Y-%m-%dT%H:%M:%S+00:00', ? + i * 6, 'unixepoch'), i,
			       CASE i % 5 WHEN 0 THEN 'send_message' WHEN 1 THEN 'get_unread_messages' WHEN 2 THEN 'join_group' WHEN 3 THEN 'list_groups' ELSE 'get_users' END,
			       ?, 'ctx' || (i % 3), 'Member ' || (i % 3), CASE WHEN i % 37 = 0 THEN 'error' ELSE 'success' END, 5 + i % 120,
			       CASE WHEN i % 37 = 0 THEN 'validation' END FROM n`, auditRows, base, ids[0]); err != nil {
			return err
		}
		for _, tier := range auditResolutions {
			bucket := fmt.Sprintf("(CAST(strftime('%%s', occurred_at) AS INTEGER) / %d * %d)", tier.seconds, tier.seconds)
			dims := "tool_name, COALESCE(group_id, ''), COALESCE(context_id, ''), COALESCE(name, ''), outcome, COALESCE(error_category, '')"
			if _, err := tx.Exec("INSERT INTO analytics_" + tier.suffix + " SELECT " + bucket + ", " + dims + ", COUNT(*), SUM(outcome = 'error'), SUM(duration_ms) FROM tool_calls GROUP BY 1, 2, 3, 4, 5, 6, 7"); err != nil {
				return err
			}
			if _, err := tx.Exec("INSERT INTO analytics_latency_" + tier.suffix + " SELECT " + bucket + ", " + dims + ", 'exact:' || duration_ms, COUNT(*) FROM tool_calls GROUP BY 1, 2, 3, 4, 5, 6, 7, 8"); err != nil {
				return err
			}
		}
		for _, field := range []string{"tool_name", "name", "group_id"} {
			if _, err := tx.Exec("INSERT INTO analytics_filter_values(field, value, label, count) SELECT ?, "+field+", "+field+", COUNT(*) FROM tool_calls GROUP BY "+field, field); err != nil {
				return err
			}
		}
		return nil
	})
	return fx, ids
}

// TestOverviewRenderBudget checks the budget: Overview for 50
// groups × 2,000 messages with 20,000 audit rows renders in under 150 ms.
// Under the race detector, which times nothing, it checks the same page on
// a tenth of the messages and audit rows: seeding the whole deployment
// took 88 of the suite's 475 s there.
func TestOverviewRenderBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 100,000-message deployment")
	}
	groups, perGroup, calls := 50, 2000, 20000
	if raceEnabled() {
		perGroup, calls = 200, 2000
	}
	start := time.Now()
	fx, _ := seedLoad(t, groups, perGroup, calls)
	t.Logf("seeded %d groups × %d messages and %d audit rows in %v", groups, perGroup, calls, time.Since(start).Round(time.Millisecond))
	obs := newTestObserver(t, fx.dir, time.Second)
	for _, path := range []string{"/fragments/overview", "/"} {
		get(t, obs, path)
		var times []time.Duration
		var body string
		for i := 0; i < 7; i++ {
			t0 := time.Now()
			var code int
			code, body, _ = get(t, obs, path)
			times = append(times, time.Since(t0))
			if code != 200 {
				t.Fatalf("%s got %d", path, code)
			}
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		median := times[len(times)/2]
		t.Logf("%s: median %v, min %v, max %v (%d KiB)", path, median.Round(100*time.Microsecond), times[0].Round(100*time.Microsecond), times[len(times)-1].Round(100*time.Microsecond), len(body)/1024)
		if !strings.Contains(body, fmt.Sprintf("Groups</strong><span>%d<", groups)) ||
			!strings.Contains(body, fmt.Sprintf("Messages</strong><span>%d<", groups*perGroup)) ||
			!strings.Contains(body, fmt.Sprintf("Tool calls</strong><span>%d<", calls)) {
			t.Errorf("%s does not show the seeded totals", path)
		}
		if n := strings.Count(body, `<li class="event `); n != overviewEventLimit {
			t.Errorf("%s shows %d activity events; want %d", path, n, overviewEventLimit)
		}
		if !raceEnabled() && median > 150*time.Millisecond {
			t.Errorf("%s median render %v; want under 150ms", path, median)
		}
	}
}

// BenchmarkOverview measures one Overview render on the load.
func BenchmarkOverview(b *testing.B) {
	fx, _ := seedLoad(b, 50, 2000, 20000)
	obs := newTestObserver(b, fx.dir, time.Second)
	get(b, obs, "/fragments/overview")
	for b.Loop() {
		get(b, obs, "/fragments/overview")
	}
}

// TestEventsFanOut checks that 50 concurrent /events clients each receive a
// new message's event within one poll interval of the write. It is long
// because it starts, times and checks the clients in one place.
func TestEventsFanOut(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 50 streams")
	}
	const clients = 50
	const poll = 500 * time.Millisecond
	fx, ids := seedLoad(t, 50, 20, 100)
	obs := newTestObserver(t, fx.dir, poll)
	addr := serveObserver(t, obs)
	transport := &http.Transport{MaxConnsPerHost: clients + 5, MaxIdleConnsPerHost: clients + 5}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	var ready, finished sync.WaitGroup
	arrivals := make([]time.Time, clients)
	errs := make(chan error, clients)
	want := `"group_id":"` + ids[7] + `"`
	for i := 0; i < clients; i++ {
		ready.Add(1)
		finished.Add(1)
		go func(i int) {
			defer finished.Done()
			resp, err := client.Get("http://" + addr + "/events")
			if err != nil {
				ready.Done()
				errs <- err
				return
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			signalled := false
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					if !signalled {
						ready.Done()
					}
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				if !signalled && strings.HasPrefix(line, "event: snapshot") {
					signalled = true
					ready.Done()
				}
				if strings.HasPrefix(line, "event: message.created") {
					data, _ := r.ReadString('\n')
					if strings.Contains(data, want) {
						arrivals[i] = time.Now()
						return
					}
				}
			}
		}(i)
	}
	ready.Wait()
	if n := obs.hub.subscriberCount(); n != clients {
		t.Fatalf("got %d subscribers; want %d", n, clients)
	}
	wrote := time.Now()
	fx.messages(ids[7], fixtureMessage{Sender: "ctx0", SenderName: "Member zero", Content: "fan-out", At: wrote})
	waitDone := make(chan struct{})
	go func() { finished.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(10 * time.Second):
		t.Fatal("not every client received the event within 10s")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var lat []time.Duration
	for _, a := range arrivals {
		if !a.IsZero() {
			lat = append(lat, a.Sub(wrote))
		}
	}
	if len(lat) != clients {
		t.Fatalf("%d of %d clients received the event", len(lat), clients)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("%d clients, poll %v: event latency after write min %v, median %v, max %v", clients, poll,
		lat[0].Round(time.Millisecond), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	if budget := poll + 100*time.Millisecond; !raceEnabled() && lat[len(lat)-1] > budget {
		t.Errorf("slowest client got the event %v after the write; want within one poll interval (%v, plus fan-out slack)", lat[len(lat)-1], poll)
	}
}

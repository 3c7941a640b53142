package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestEscaping(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	fx.enableAudit(now.Add(-time.Hour))
	evil := `<img src=x onerror=alert(1)>`
	id := fx.group(evil, `"><script>alert(2)</script>`, now, fixtureMember{"<ctx>", `<b>bold</b>`})
	fx.messages(id, fixtureMessage{Sender: "<ctx>", SenderName: "<i>Sender</i>", Content: "<script>alert(1)</script>", At: now, Priority: "<u>p</u>"})
	fx.calls(fixtureCall{At: now, Tool: "<svg onload=alert(3)>", Group: id, GroupName: evil, Caller: "<script>c</script>", Duration: 1})
	obs := newTestObserver(t, fx.dir, time.Second)
	const (
		group    = "&lt;img src=x onerror=alert(1)&gt;"
		desc     = "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
		member   = "&lt;b&gt;bold&lt;/b&gt;"
		sender   = "&lt;i&gt;Sender&lt;/i&gt;"
		message  = "&lt;script&gt;alert(1)&lt;/script&gt;"
		priority = "&lt;u&gt;p&lt;/u&gt;"
		tool     = "&lt;svg onload=alert(3)&gt;"
		caller   = "&lt;script&gt;c&lt;/script&gt;"
	)
	tests := []struct {
		path    string
		escaped []string
	}{
		{"/", []string{group, tool, sender, message, priority}},
		{"/fragments/overview", []string{group, tool, sender, message, priority}},
		{"/fragments/chats", []string{group, desc, member, sender, message, priority}},
		{"/fragments/chat?group_id=" + id, []string{group, desc, member, sender, message, priority}},
		{"/fragments/messages?group_id=" + id, []string{sender, message, priority}},
		{"/fragments/message?group_id=" + id + "&message_id=1", []string{sender, message, priority}},
		{"/fragments/analytics", []string{group, tool, caller}},
		{"/fragments/overview-group-row?group_id=" + id, []string{group}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body, _ := get(t, obs, tt.path)
			if code != http.StatusOK {
				t.Fatalf("got status %d; want 200 (body %.200q)", code, body)
			}
			for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload", "<script>c", "<i>Sender", "<b>bold", "<u>p"} {
				if strings.Contains(body, raw) {
					t.Errorf("body contains live markup %q", raw)
				}
			}
			for _, e := range tt.escaped {
				if !strings.Contains(body, e) {
					t.Errorf("body lacks the escaped form %q", e)
				}
			}
		})
	}
	_, body, _ := get(t, obs, "/fragments/chat?group_id="+id)
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("chat does not show the escaped message text")
	}
	if !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Error("chat does not show the escaped group name")
	}
}

func TestOfflineAssets(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(staticFiles, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := staticFiles.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range external.FindAllString(string(data), -1) {
			if !strings.HasSuffix(m, "//www.w3.org") {
				t.Errorf("%s references an external host: %s", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	obs := newTestObserver(t, fx.dir, time.Second)
	_, body, _ := get(t, obs, "/")
	for _, src := range regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		if !strings.HasPrefix(src[1], "/static/") {
			t.Errorf("page loads %q; want only embedded /static/ assets", src[1])
		}
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " style=") {
		t.Error("page has inline script or style, which the CSP blocks")
	}
}

func TestPageOpensTheViewItsAddressNames(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	fx.enableAudit(now.Add(-time.Hour))
	first := fx.group("Alpha", "", now, fixtureMember{"a", "Ann"})
	second := fx.group("Beta", "", now, fixtureMember{"b", "Bo"})
	fx.calls(fixtureCall{At: now, Tool: "send_message", Group: first, Caller: "Ann", Outcome: "error", Category: "validation", Duration: 3})
	obs := newTestObserver(t, fx.dir, time.Second)
	tests := []struct {
		query string
		want  []string
	}{
		{"", []string{`data-view-name="overview"`, `<h1 id="page-title">Overview · operational cockpit</h1>`, `class="is-active" aria-current="page" data-nav="overview"`}},
		{"?view=chats&group_id=" + second, []string{`data-view-name="chats"`, `<section class="chat" data-group-id="` + second + `"`, `<title>Chats · Crosstalk observer</title>`}},
		{"?view=analytics&outcome=error&range_value=24&range_unit=h", []string{`data-view-name="analytics"`, `<option value="error" selected>`, `name="range_value" value="24"`, `class="is-active" aria-current="page" data-nav="analytics"`}},
		{"?view=storage", []string{`data-view-name="storage"`}},
		{"?view=nonsense", []string{`data-view-name="overview"`}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			code, body, _ := get(t, obs, "/"+tt.query)
			if code != http.StatusOK {
				t.Fatalf("got status %d; want 200", code)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("/%s lacks %q", tt.query, w)
				}
			}
			if n := strings.Count(body, "data-view-name="); n != 1 {
				t.Errorf("/%s renders %d views; want exactly one", tt.query, n)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tt := range []struct {
		seconds float64
		want    string
	}{
		{0, "0 s"}, {-3, "0 s"}, {59.4, "59 s"}, {60, "1 m"}, {7200, "2 h"}, {200, "3 m 20 s"}, {27394.2, "7 h 36 m"}, {86400*2 + 3600*5 + 59, "2 d 5 h"},
	} {
		if got := formatDuration(tt.seconds); got != tt.want {
			t.Errorf("formatDuration(%v) = %q; want %q", tt.seconds, got, tt.want)
		}
	}
}

// TestPageSaysWhatItWrites checks that the dashboard's own labels claim no
// more than is true: read-only for group data, with the sentence naming the
// Storage view's writes one hover away, and no plain "Read-only observer".
func TestPageSaysWhatItWrites(t *testing.T) {
	obs := newTestObserver(t, newObserveFixture(t).dir, time.Second)
	code, body, _ := get(t, obs, "/")
	if code != http.StatusOK {
		t.Fatalf("got status %d; want 200", code)
	}
	const sentence = `title="Read-only for group data; the Storage view's two maintenance actions write the audit database."`
	for _, want := range []string{
		`<div class="rail-foot" ` + sentence + `><span class="rail-text">Read-only for group data</span></div>`,
		`<span class="mono" ` + sentence + `>Local · read-only for group data</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "Read-only observer") {
		t.Error(`page still says "Read-only observer"`)
	}
}

// TestStorageActions runs both maintenance actions against a real audit
// database. It is long because each step depends on the one before: delete
// frees the pages the second reclaim then returns.
func TestStorageActions(t *testing.T) {
	fx := newObserveFixture(t)
	id := seedBasic(fx, time.Now())
	var bulk []fixtureCall
	for i := 0; i < 3000; i++ {
		bulk = append(bulk, fixtureCall{At: time.Now().Add(-time.Duration(i) * time.Minute), Tool: fmt.Sprintf("tool_%d", i%40), Caller: fmt.Sprintf("caller %d", i%30), Duration: int64(i % 900)})
	}
	fx.calls(bulk...)
	obs := newTestObserver(t, fx.dir, time.Second)
	groupFile := groupFile(fx.dir, id)
	groupBefore, err := os.ReadFile(groupFile)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string, headers map[string]string) (int, string) {
		req := loopbackRequest(http.MethodPost, path)
		req.Header.Set("X-CSRF-Token", obs.csrfToken)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		obs.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := post("/api/storage/reclaim", nil); code != 200 || !strings.Contains(body, "Reclaimed") {
		t.Errorf("reclaim got %d %q; want 200", code, body)
	}
	code, body := post("/api/storage/delete-history", map[string]string{"X-Crosstalk-Confirm": "DELETE AUDIT HISTORY", "Origin": "http://127.0.0.1:8787"})
	if code != 200 || !strings.Contains(body, "Deleted 3003 audit-history rows") {
		t.Errorf("delete got %d %q; want 200 and the count", code, body)
	}
	for _, table := range auditHistoryTables {
		if n := countRows(t, fx.dir, table); n != 0 {
			t.Errorf("%s has %d rows after deletion; want 0", table, n)
		}
	}
	if n := countRows(t, fx.dir, "groups"); n != 1 {
		t.Errorf("catalog has %d rows after deletion; want 1 (kept)", n)
	}
	if n := countRows(t, fx.dir, "metadata"); n != 1 {
		t.Errorf("metadata has %d rows after deletion; want 1 (kept)", n)
	}
	groupAfter, _ := os.ReadFile(groupFile)
	if !bytes.Equal(groupBefore, groupAfter) {
		t.Error("a storage action changed a group database")
	}
	freeBefore := observabilityInt(t, fx.dir, "PRAGMA freelist_count")
	if freeBefore == 0 {
		t.Fatal("deleting history left no free pages to reclaim")
	}
	if code, _ := post("/api/storage/reclaim", nil); code != 200 {
		t.Errorf("second reclaim got %d; want 200", code)
	}
	if freeAfter := observabilityInt(t, fx.dir, "PRAGMA freelist_count"); freeAfter >= freeBefore {
		t.Errorf("free pages went from %d to %d; want fewer after reclaim", freeBefore, freeAfter)
	}
	empty := newTestObserver(t, filepath.Join(t.TempDir(), "none"), time.Second)
	req := loopbackRequest(http.MethodPost, "/api/storage/reclaim")
	req.Header.Set("X-CSRF-Token", empty.csrfToken)
	rec := httptest.NewRecorder()
	empty.ServeHTTP(rec, req)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "No audit database exists yet.") {
		t.Errorf("reclaim without a database got %d %q; want 409", rec.Code, rec.Body.String())
	}
	if _, err := os.Stat(filepath.Join(empty.dir, catalogFileName)); !os.IsNotExist(err) {
		t.Error("a storage action created observability.sqlite3")
	}
}

// TestStorageCountsTheWAL checks that the audit file's size includes its
// write-ahead log, which holds recent writes until a checkpoint.
func TestStorageCountsTheWAL(t *testing.T) {
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	path := filepath.Join(fx.dir, catalogFileName)
	writer := openTestDB(t, path, "rw")
	writer.SetMaxOpenConns(1)
	if _, err := writer.Exec("PRAGMA wal_autocheckpoint = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec("CREATE TABLE padding(x); INSERT INTO padding SELECT randomblob(1 << 20)"); err != nil {
		t.Fatal(err)
	}
	db, err1 := os.Stat(path)
	wal, err2 := os.Stat(path + "-wal")
	if err1 != nil || err2 != nil || wal.Size() < 1<<20 {
		t.Fatalf("got WAL %v (%v, %v); want over 1 MiB uncheckpointed", wal, err1, err2)
	}
	_, body, _ := get(t, newTestObserver(t, fx.dir, time.Second), "/fragments/storage")
	if want := "<dd>" + formatBytes(db.Size()+wal.Size()) + " (WAL included)</dd>"; !strings.Contains(body, want) {
		t.Errorf("storage view lacks %q:\n%s", want, body)
	}
}

// TestToolLabelKeepsLettersWhole calls a tool whose name starts with a
// letter outside ASCII, as an unknown (misspelt or localized) tool call is
// recorded: the dashboard must capitalize the letter, not split its bytes.
func TestToolLabelKeepsLettersWhole(t *testing.T) {
	for name, want := range map[string]string{"send_message": "Send Message", "écrire_message": "Écrire Message", "_x__y": " X  Y", "日本_語": "日本 語"} {
		if got := toolLabel(name); got != want {
			t.Errorf("toolLabel(%q) = %q; want %q", name, got, want)
		}
	}
	fx := newObserveFixture(t)
	fx.enableAudit(time.Now().Add(-time.Hour))
	fx.calls(fixtureCall{At: time.Now().Add(-time.Minute), Tool: "écrire_message", Caller: "Agent", Outcome: "error", Category: "validation", Duration: 2})
	_, body, _ := get(t, newTestObserver(t, fx.dir, time.Second), "/fragments/overview")
	if !strings.Contains(body, "<strong>Écrire Message</strong>") {
		t.Fatalf("the Overview's failure list does not name the tool Écrire Message: %q", body)
	}
}

// TestStorageActionFailureSaysWhy checks that a maintenance action that
// fails for a reason other than a busy writer says that reason, rather than
// asking the user to retry an action that can never succeed.
func TestStorageActionFailureSaysWhy(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, catalogFileName), bytes.Repeat([]byte("not sqlite "), 400), 0o644); err != nil {
		t.Fatal(err)
	}
	obs := newTestObserver(t, dir, time.Second)
	req := loopbackRequest(http.MethodPost, "/api/storage/reclaim")
	req.Header.Set("X-CSRF-Token", obs.csrfToken)
	rec := httptest.NewRecorder()
	obs.ServeHTTP(rec, req)
	if body := rec.Body.String(); rec.Code != http.StatusConflict || strings.Contains(body, "retry") || !strings.Contains(body, "not a database") {
		t.Errorf("reclaim of a damaged audit file got %d %q; want 409 naming the damage, without retry", rec.Code, body)
	}
}

// TestHugeNamesStayBounded: nothing bounds a group's or member's name, and
// views repeat names on every row (each event of the live activity, each
// message, receipt, wakeup and audited call), so one agent's megabyte name
// made a page of hundreds of megabytes. Names are shown cut instead.
func TestHugeNamesStayBounded(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	fx.enableAudit(now.Add(-time.Hour))
	groupName, memberName := strings.Repeat("G", 100_000), strings.Repeat("M", 100_000)
	id := fx.group(groupName, "", now.Add(-time.Hour), fixtureMember{"big", memberName}, fixtureMember{"bo", "Bo"})
	var msgs []fixtureMessage
	var calls []fixtureCall
	for i := range 40 {
		at := now.Add(time.Duration(i-60) * time.Second)
		msgs = append(msgs, fixtureMessage{Sender: "big", SenderName: memberName, Content: "hello", At: at},
			fixtureMessage{Sender: "bo", SenderName: "Bo", Content: "hi", At: at})
		calls = append(calls, fixtureCall{At: at, Tool: "send_message", Group: id, GroupName: groupName, Caller: "Bo", Duration: 5})
	}
	for _, mid := range fx.messages(id, msgs...) {
		fx.wakeup(id, mid, "bo", now.Add(-time.Minute), time.Time{})
	}
	fx.calls(calls...)
	obs := newTestObserver(t, fx.dir, time.Second)
	for _, path := range []string{"/fragments/overview", "/fragments/chats?group_id=" + id, "/fragments/analytics"} {
		code, body, _ := get(t, obs, path)
		if code != http.StatusOK || len(body) > 1<<20 || !strings.Contains(body, strings.Repeat("G", 1024)) {
			t.Errorf("%s: got status %d, %d KiB; want 200, under 1 MiB, the group's name shown cut", path, code, len(body)>>10)
		}
	}
}

// TestHugeContextIDsStayBounded: a context id is any string its agent
// chooses, and the chat names each wakeup's target by it (for copying), so
// a megabyte id made the side panel hundreds of megabytes; it is cut too.
func TestHugeContextIDsStayBounded(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	huge := strings.Repeat("c", 100_000)
	id := fx.group("Ids", "", now.Add(-time.Hour), fixtureMember{"bo", "Bo"}, fixtureMember{huge, "Cy"})
	var msgs []fixtureMessage
	for range 40 {
		msgs = append(msgs, fixtureMessage{Sender: "bo", SenderName: "Bo", Content: "hi @Cy", At: now.Add(-time.Minute)})
	}
	for _, mid := range fx.messages(id, msgs...) {
		fx.wakeup(id, mid, huge, now.Add(-time.Minute), time.Time{})
	}
	obs := newTestObserver(t, fx.dir, time.Second)
	for _, path := range []string{"/fragments/overview", "/fragments/chats?group_id=" + id} {
		if code, body, _ := get(t, obs, path); code != http.StatusOK || len(body) > 1<<20 || !strings.Contains(body, ">Cy<") {
			t.Errorf("%s: got status %d, %d KiB; want 200, under 1 MiB, the member named", path, code, len(body)>>10)
		}
	}
}

// TestMessageTextPastANULIsShown: the chat read each message with substr,
// which stops at a NUL character, so it hid whatever an agent wrote after
// one, while the agents' tools return the whole message.
func TestMessageTextPastANULIsShown(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	id := fx.group("Nul", "", now, fixtureMember{"bo", "Bo"}, fixtureMember{"cy", "Cy"})
	fx.messages(id, fixtureMessage{Sender: "bo", SenderName: "Bo", Content: "hello\x00 hidden tail", At: now})
	obs := newTestObserver(t, fx.dir, time.Second)
	for _, path := range []string{"/fragments/chat?group_id=" + id, "/fragments/messages?group_id=" + id, "/fragments/message?group_id=" + id + "&message_id=1"} {
		t.Run(path, func(t *testing.T) {
			if _, body, _ := get(t, obs, path); !strings.Contains(body, "hello\uFFFD hidden tail") {
				t.Errorf("got no text past the NUL; want %q shown", "hello\uFFFD hidden tail")
			}
		})
	}
}

// TestNamesAndPreviewsPastANULAreShown: names, descriptions and message
// previews are cut with substr too, which stops at a NUL, so the views hid
// the rest of "Bo\x00 the admin" as of a message's first line.
func TestNamesAndPreviewsPastANULAreShown(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	fx.enableAudit(now.Add(-time.Hour))
	id := fx.group("Group\x00 name tail", "Described\x00 description tail", now.Add(-time.Hour),
		fixtureMember{"bo", "Bo\x00 member tail"}, fixtureMember{"cy", "Cy"})
	mid := fx.messages(id, fixtureMessage{Sender: "bo", SenderName: "Bo\x00 member tail", Content: "hello\x00 preview tail", At: now})[0]
	fx.wakeup(id, mid, "cy", now, time.Time{})
	fx.calls(fixtureCall{At: now, Tool: "send_message", Group: id, GroupName: "Group\x00 name tail", Caller: "Bo", Duration: 5})
	obs := newTestObserver(t, fx.dir, time.Second)
	chat := "/fragments/chat?group_id=" + id
	for _, tt := range []struct{ path, tail string }{
		{"/fragments/overview", "name tail"},
		{"/fragments/overview", "member tail"},
		{"/fragments/overview", "preview tail"},
		{"/fragments/chats?group_id=" + id, "name tail"},
		{chat, "description tail"},
		{chat, "member tail"},
		{chat, "member tail: hello\uFFFD preview tail"}, // the wakeup's excerpt
		{"/fragments/analytics", "name tail"},
	} {
		t.Run(tt.path+" "+tt.tail, func(t *testing.T) {
			if _, body, _ := get(t, obs, tt.path); !strings.Contains(body, "\uFFFD "+tt.tail) {
				t.Errorf("got no %q; want the text past the NUL shown", tt.tail)
			}
		})
	}
}

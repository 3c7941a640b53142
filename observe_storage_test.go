package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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

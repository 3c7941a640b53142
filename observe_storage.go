package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// storageView is the Storage fragment, whose two maintenance actions on the
// audit database, here too, are the dashboard's only writes.
type storageView struct {
	Available bool
	Notice    string
	Details   []metric
}

// reclaimPages bounds a "Reclaim space" step: a click never stalls the writer.
const reclaimPages = 100

// serveReclaim runs "Reclaim space"; requireCSRF has checked the request.
func (o *observer) serveReclaim(w http.ResponseWriter, r *http.Request) {
	msg, err := reclaimAuditSpace(r.Context(), o.dir, reclaimPages)
	o.renderMaintenance(w, r, msg, err)
}

// deleteConfirmation is the header value the page sends only after the
// user typed the confirmation, so no stray POST can empty the history.
const deleteConfirmation = "DELETE AUDIT HISTORY"

// serveDeleteHistory runs "Delete audit history" once CSRF-checked and confirmed.
func (o *observer) serveDeleteHistory(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Crosstalk-Confirm") != deleteConfirmation {
		o.renderNotice(w, r, http.StatusBadRequest, true, "Audit-history deletion requires explicit confirmation.")
		return
	}
	msg, err := deleteAuditHistory(r.Context(), o.dir)
	o.renderMaintenance(w, r, msg, err)
}

// renderMaintenance reports a maintenance action's outcome; a failure is a
// conflict with the audit writer or a missing database, worth a retry.
func (o *observer) renderMaintenance(w http.ResponseWriter, r *http.Request, msg string, err error) {
	o.renderNotice(w, r, map[bool]int{false: http.StatusOK, true: http.StatusConflict}[err != nil], err != nil, msg)
}

// storageView reads the audit database's size, rows, free pages, retention.
func (o *observer) storageView(ctx context.Context) storageView {
	missing := storageView{Notice: "No audit database exists yet. Enable auditing and make a tool call to create it."}
	unavailable := storageView{Notice: "Audit storage is temporarily unavailable; retry shortly."}
	a, err := o.readAuditSchema(ctx)
	switch {
	case errors.Is(err, errNoDatabase):
		return missing
	case err != nil:
		return unavailable
	case !a.tables["tool_calls"]:
		return missing
	}
	var rowsCount, pageSize, freePages int64
	path := filepath.Join(o.dir, catalogFileName)
	info, err := os.Stat(path)
	if err != nil || a.db.QueryRowContext(ctx, "SELECT COUNT(*), (SELECT page_size FROM pragma_page_size), "+
		"(SELECT freelist_count FROM pragma_freelist_count) FROM tool_calls").Scan(&rowsCount, &pageSize, &freePages) != nil {
		return unavailable
	}
	// Until a checkpoint, recent writes live in the WAL beside the file; on
	// a busy server that is most of the space the audit history takes.
	size := info.Size()
	if wal, err := os.Stat(path + "-wal"); err == nil {
		size += wal.Size()
	}
	meta, _ := auditMetadata(ctx, a)
	return storageView{Available: true, Details: []metric{
		{Label: "Audit file", Value: formatBytes(size) + " (WAL included)"},
		{Label: "Audit rows", Value: fmt.Sprint(rowsCount)},
		{Label: "Reclaimable", Value: formatBytes(pageSize * freePages)},
		{Label: "Retention", Value: firstNonEmpty(meta.Retention, "unknown (legacy audit database)")},
		{Label: "Activated", When: o.stampOf(meta.EnabledAt, "—")},
		{Label: "Last cleanup", When: o.stampOf(meta.LastCleanup, "Never")},
	}}
}

// openAuditForWrite opens observability.sqlite3 read-write, if it exists;
// mode=rw fails instead of creating a missing file.
func openAuditForWrite(dir string) (*sql.DB, string, error) {
	path := filepath.Join(dir, catalogFileName)
	if _, err := checkedFile(dir, path); err != nil {
		return nil, "No audit database exists yet.", err
	}
	db, err := sql.Open("sqlite", sqliteDSN(path, "rw"))
	if err != nil {
		return nil, "Audit storage is busy; retry later.", fmt.Errorf("open audit database: %w", err)
	}
	db.SetMaxOpenConns(1)
	return db, "", nil
}

// reclaimAuditSpace runs one bounded incremental vacuum step; it never
// deletes retained history and never touches a group database.
func reclaimAuditSpace(ctx context.Context, dir string, pages int) (string, error) {
	db, msg, err := openAuditForWrite(dir)
	if err != nil {
		return msg, err
	}
	defer db.Close()
	// The pragma frees one page per step, so every row must be read.
	err = eachRow(ctx, db, func(rowScanner) error { return nil }, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", pages))
	if err != nil {
		return "Audit storage is busy; retry later.", fmt.Errorf("reclaim audit space: %w", err)
	}
	return "Reclaimed available audit free pages.", nil
}

// deleteAuditHistory deletes every audit row and rollup in one transaction.
func deleteAuditHistory(ctx context.Context, dir string) (string, error) {
	db, msg, err := openAuditForWrite(dir)
	if err != nil {
		return msg, err
	}
	defer db.Close()
	busy := "Audit storage is busy; retry later."
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return busy, fmt.Errorf("delete audit history: %w", err)
	}
	defer tx.Rollback()
	tables, err := tableNames(ctx, tx)
	if err != nil {
		return busy, err
	}
	var deleted int64
	for _, t := range auditHistoryTables {
		if !tables[t] {
			continue
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM "+t)
		if err != nil {
			return busy, fmt.Errorf("delete audit history from %s: %w", t, err)
		}
		if t == "tool_calls" {
			deleted, _ = res.RowsAffected()
		}
	}
	if err := tx.Commit(); err != nil {
		return busy, fmt.Errorf("delete audit history: %w", err)
	}
	return fmt.Sprintf("Deleted %d audit-history rows. Reclaim free space separately if needed.", deleted), nil
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// dashboardView is the full page: the shell plus the one view its address
// names ("/?view=chats&group_id=…"), so that a reload, Back or a shared link
// opens where the user was, also without JavaScript.
type dashboardView struct {
	CSRFToken string
	View      string // overview, chats, analytics or storage; headings are the template's
	Panel     any
}

// dashboardView reads the page for the view r's ?view= names, else Overview.
func (o *observer) dashboardView(r *http.Request) dashboardView {
	v := dashboardView{CSRFToken: o.csrfToken, View: r.URL.Query().Get("view")}
	if v.View != "chats" && v.View != "analytics" && v.View != "storage" {
		v.View = "overview"
	}
	v.Panel = o.panels()[v.View](r)
	return v
}

//go:embed static
var staticFiles embed.FS

// pageTemplates holds every page and fragment, parsed on first use (stdio never renders one).
var pageTemplates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").ParseFS(staticFiles, "static/*.html"))
})

// staticHandler serves the embedded assets, revalidated on each load (they
// are tiny) so that an upgraded binary never shows stale scripts.
func staticHandler() http.HandlerFunc {
	files := http.FileServerFS(staticFiles) // at /static/, as the paths are
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}
}

// renderPage executes one template into a buffer first, so a template error
// becomes a clean 500 instead of half a page.
func (o *observer) renderPage(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := pageTemplates().ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, "The dashboard could not render this view.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(buf.Bytes())
	}
}

// renderNotice renders a one-line notice with status.
func (o *observer) renderNotice(w http.ResponseWriter, r *http.Request, status int, isError bool, text string) {
	o.renderPage(w, r, status, "notice", struct {
		Error bool
		Text  string
	}{isError, text})
}

// stamp is a stored timestamp prepared for display: ISO for the browser to
// re-render in the viewer's zone, Text as a server-side fallback.
type stamp struct {
	ISO, Text string
}

// parseStamp reads the ISO 8601 timestamps writers store.
func parseStamp(raw string) (time.Time, bool) {
	t, err := pyFromISOFormat(strings.TrimSpace(raw))
	return t, err == nil
}

// stampOf formats raw for display, with empty standing in for no value.
func (o *observer) stampOf(raw, empty string) stamp {
	t, ok := parseStamp(raw)
	if !ok {
		return stamp{Text: firstNonEmpty(raw, empty)}
	}
	return stamp{ISO: t.UTC().Format(time.RFC3339Nano), Text: t.In(o.location).Format("2006-01-02 15:04:05 MST (-0700)")}
}

// successLabel and unknownErrorLabel name the outcomes that are no error category.
const (
	successLabel      = "Success"
	unknownErrorLabel = "Unknown Error"
)

// errorCategories names and colours the failure categories audit rows store.
var errorCategories = []struct{ Key, Label, Color string }{
	{categoryValidation, "Validation Error", "#c0504d"},
	{categoryNotFound, "Not Found Error", "#c9822b"},
	{categoryAuthorization, "Authorization Error", "#a6466f"},
	{categoryBusy, "Database Busy Error", "#b8a03a"},
	{categoryInternal, "Internal Error", "#e06666"},
}

// errorCategoryLabel names a stored error category.
func errorCategoryLabel(category string) string {
	for _, c := range errorCategories {
		if c.Key == category {
			return c.Label
		}
	}
	return unknownErrorLabel
}

// outcomeLabel names an audit row's outcome: success, or its error category.
func outcomeLabel(outcome, category string) string {
	if outcome == "success" {
		return successLabel
	}
	return errorCategoryLabel(category)
}

// toolLabel makes a snake_case tool name readable: "send_message" → "Send Message".
func toolLabel(name string) string {
	parts := strings.Split(cmp.Or(name, "tool"), "_")
	for i, p := range parts {
		if _, n := utf8.DecodeRuneInString(p); n > 0 { // a whole letter, not its first byte
			parts[i] = strings.ToUpper(p[:n]) + p[n:]
		}
	}
	return strings.Join(parts, " ")
}

// percentText renders a ratio as "12.5%".
func percentText(part, total int64) string {
	if total == 0 {
		return "0.0%"
	}
	return fmt.Sprintf("%.1f%%", float64(part)*100/float64(total))
}

// firstNonEmpty returns the first value that is not blank, else "".
func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// formatDuration renders seconds the way a person reads them, to the two
// largest units: "45 s", "3 m 20 s", "7 h 36 m", "2 d 5 h", "1 m".
func formatDuration(seconds float64) string {
	total := max(int64(math.Round(seconds)), 0)
	units := []struct {
		name string
		size int64
	}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}}
	for i, u := range units[:3] {
		if total >= u.size {
			next := units[i+1]
			if rest := total % u.size / next.size; rest > 0 {
				return fmt.Sprintf("%d %s %d %s", total/u.size, u.name, rest, next.name)
			}
			return fmt.Sprintf("%d %s", total/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d s", total)
}

// formatBytes renders a size as the original does: "80.0 KiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, next := range []string{"MiB", "GiB"} {
		if v >= 1024 {
			v, unit = v/1024, next
		}
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// loopbackOnly refuses requests whose Host header does not name the
// loopback interface (a DNS-rebinding page), and absolute-form request
// lines, for which net/http drops the Host header; browsers send those
// only to proxies.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Host != "" || !allowedHost(r.Host) {
			http.Error(w, "Forbidden: this server only answers loopback host names.", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedHost reports whether a Host (or Origin host) names the loopback interface.
func allowedHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(hostOf(host), "["), "]")
	return slices.Contains([]string{"127.0.0.1", "localhost", "::1"}, strings.ToLower(host))
}

// hostOf is the host of a host:port, else all of it; HTTP's per-client bounds count by it.
func hostOf(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

// contentSecurityPolicy allows only this origin: no inline script or style,
// no third-party connection, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; worker-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets the headers every response carries, errors included.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// requireCSRF lets a POST through only with this process's CSRF token and
// no origin but a loopback one: "Origin: null" (sandboxed frames, data: URLs)
// is refused even with the token, as such a page is anyone's.
func (o *observer) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !loopbackOrigin(origin) {
			o.renderNotice(w, r, http.StatusForbidden, true, "Maintenance request rejected: cross-origin request.")
			return
		}
		token := r.Header.Get("X-CSRF-Token")
		if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(o.csrfToken)) != 1 {
			o.renderNotice(w, r, http.StatusForbidden, true, "Maintenance request rejected: invalid CSRF token.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether an Origin header value is an http(s)
// origin on a loopback host name.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return allowedHost(u.Host)
}

// storageView is the Storage fragment, whose two maintenance actions on the
// audit database are the dashboard's only writes.
type storageView struct {
	Available bool
	Notice    string
	Details   []metric
}

// storageView reads the audit database's size, rows, free pages, retention.
func (o *observer) storageView(ctx context.Context) storageView {
	unavailable := storageView{Notice: "Audit storage is temporarily unavailable; retry shortly."}
	a, err := o.readAuditSchema(ctx)
	switch {
	case errors.Is(err, errNoDatabase) || err == nil && !a.tables["tool_calls"]:
		return storageView{Notice: "No audit database exists yet. Enable auditing and make a tool call to create it."}
	case err != nil:
		return unavailable
	}
	var rowsCount, pageSize, freePages int64
	path := filepath.Join(o.dir, catalogFileName)
	info, err := os.Stat(path)
	if err != nil || a.db.QueryRowContext(ctx, "SELECT COUNT(*), (SELECT page_size FROM pragma_page_size), "+
		"(SELECT freelist_count FROM pragma_freelist_count) FROM tool_calls").Scan(&rowsCount, &pageSize, &freePages) != nil {
		return unavailable
	}
	// Until a checkpoint, recent writes live in the WAL, on a busy server
	// most of the space.
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

// reclaimPages bounds a "Reclaim space" step: a click never stalls the writer.
const reclaimPages = 100

// auditBusy is the notice of a maintenance action that met the audit writer.
const auditBusy = "Audit storage is busy; retry later."

// serveReclaim runs "Reclaim space", one bounded incremental vacuum step; it
// never deletes retained history and never touches a group database.
func (o *observer) serveReclaim(w http.ResponseWriter, r *http.Request) {
	o.maintainAudit(w, r, func(ctx context.Context, db *sql.DB) (string, error) {
		// The pragma frees one page per step, so every row must be read.
		err := eachRow(ctx, db, func(rowScanner) error { return nil }, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", reclaimPages))
		if err != nil {
			return auditBusy, fmt.Errorf("reclaim audit space: %w", err)
		}
		return "Reclaimed available audit free pages.", nil
	})
}

// deleteConfirmation is the header value the page sends only after the
// user typed the confirmation, so no stray POST can empty the history.
const deleteConfirmation = "DELETE AUDIT HISTORY"

// serveDeleteHistory runs "Delete audit history" once confirmed.
func (o *observer) serveDeleteHistory(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Crosstalk-Confirm") != deleteConfirmation {
		o.renderNotice(w, r, http.StatusBadRequest, true, "Audit-history deletion requires explicit confirmation.")
		return
	}
	o.maintainAudit(w, r, deleteAuditHistory)
}

// deleteAuditHistory deletes every audit row and rollup in one transaction.
func deleteAuditHistory(ctx context.Context, db *sql.DB) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return auditBusy, fmt.Errorf("delete audit history: %w", err)
	}
	defer tx.Rollback()
	tables, err := tableNames(ctx, tx)
	if err != nil {
		return auditBusy, err
	}
	var deleted int64
	for _, t := range auditHistoryTables {
		if !tables[t] {
			continue
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM "+t)
		if err != nil {
			return auditBusy, fmt.Errorf("delete audit history from %s: %w", t, err)
		}
		if t == "tool_calls" {
			deleted, _ = res.RowsAffected()
		}
	}
	if err := tx.Commit(); err != nil {
		return auditBusy, fmt.Errorf("delete audit history: %w", err)
	}
	return fmt.Sprintf("Deleted %d audit-history rows. Reclaim free space separately if needed.", deleted), nil
}

// maintainAudit runs a maintenance action once requireCSRF has checked the
// request, on observability.sqlite3 opened read-write if it exists (mode=rw
// fails instead of creating a missing file), and reports its outcome; a
// failure is a conflict with the audit writer or a missing database, worth a
// retry.
func (o *observer) maintainAudit(w http.ResponseWriter, r *http.Request, action func(context.Context, *sql.DB) (string, error)) {
	path := filepath.Join(o.dir, catalogFileName)
	msg := "No audit database exists yet."
	_, err := checkedFile(o.dir, path)
	if err == nil {
		db := openSQLite(sqliteDSN(path, "rw"), 1)
		msg, err = action(r.Context(), db)
		db.Close()
		if err != nil && !isBusy(err) { // retrying cannot help: say why
			msg = "Audit storage could not be changed: " + err.Error()
		}
	}
	o.renderNotice(w, r, map[bool]int{false: http.StatusOK, true: http.StatusConflict}[err != nil], err != nil, msg)
}

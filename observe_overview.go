package main

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// dashboardView is the full page: the shell plus the Overview it opens on.
type dashboardView struct {
	CSRFToken string
	Overview  overviewView
}

//go:embed static
var staticFiles embed.FS

// pageTemplates holds every page and fragment. It is parsed once, on first
// use, so that the stdio server, which never renders a page, does not pay
// for it at start-up.
var pageTemplates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").ParseFS(staticFiles, "static/*.html"))
})

// staticHandler serves the embedded assets. Browsers revalidate them on each
// load (they are tiny) so an upgraded binary never shows stale scripts.
func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return http.NotFoundHandler()
	}
	files := http.FileServer(http.FS(sub))
	return http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") || strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
}

// noticeView is a one-line status message.
type noticeView struct {
	Error bool
	Text  string
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

// stamp is a stored timestamp prepared for display: ISO for the browser to
// re-render in the viewer's zone, Text as a server-side fallback.
type stamp struct {
	ISO  string
	Text string
}

// parseStamp reads the ISO 8601 timestamps writers store, ignoring
// surrounding space.
func parseStamp(raw string) (time.Time, bool) {
	t, err := auditParseTime(strings.TrimSpace(raw))
	return t, err == nil
}

// stampOf formats raw for display, with empty standing in for no value.
func (o *observer) stampOf(raw, empty string) stamp {
	t, ok := parseStamp(raw)
	if !ok {
		if strings.TrimSpace(raw) == "" {
			return stamp{Text: empty}
		}
		return stamp{Text: raw}
	}
	return stamp{ISO: t.UTC().Format(time.RFC3339Nano), Text: t.In(o.location).Format("2006-01-02 15:04:05 MST (-0700)")}
}

// errorCategoryLabels names the safe failure categories audit rows store.
var errorCategoryLabels = []struct{ Key, Label string }{
	{"validation", "Validation Error"},
	{"not_found", "Not Found Error"},
	{"authorization", "Authorization Error"},
	{"sqlite_busy", "Database Busy Error"},
	{"internal", "Internal Error"},
}

func errorCategoryLabel(category string) string {
	for _, c := range errorCategoryLabels {
		if c.Key == category {
			return c.Label
		}
	}
	return "Unknown Error"
}

// toolLabel makes a snake_case tool name readable: "send_message" → "Send Message".
func toolLabel(name string) string {
	if name == "" {
		name = "tool"
	}
	parts := strings.Split(name, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
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

// memberInfo is one group member as the dashboard shows it.
type memberInfo struct {
	ContextID string
	Name      string
	Unread    int64
}

// groupSummary is what Overview needs from one group database.
type groupSummary struct {
	ID              string
	Name            string
	UpdatedAt       string
	Members         []memberInfo
	LatestAt        string
	Pending         int64
	Acknowledged    int64
	ResponseSeconds float64
	Priorities      map[string]int64
	Unavailable     bool
}

// readGroupSummary reads one group's Overview inputs over a single
// connection. It never changes unread or wakeup state.
func (o *observer) readGroupSummary(ctx context.Context, id string) (groupSummary, error) {
	g := groupSummary{ID: id, Priorities: map[string]int64{}}
	db, err := o.dbs.group(o.dir, id)
	if err != nil {
		return g, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return g, fmt.Errorf("connect to %s: %w", id, err)
	}
	defer conn.Close()
	var name, updated sql.NullString
	err = conn.QueryRowContext(ctx, "SELECT name, updated_at FROM group_metadata WHERE id = 1").Scan(&name, &updated)
	if err != nil && err != sql.ErrNoRows {
		return g, fmt.Errorf("read metadata of %s: %w", id, err)
	}
	g.Name, g.UpdatedAt = name.String, updated.String
	if g.Name == "" {
		g.Name = "Untitled group"
	}
	if g.Members, err = readMembers(ctx, conn); err != nil {
		return g, fmt.Errorf("read members of %s: %w", id, err)
	}
	var latestAt sql.NullString
	err = conn.QueryRowContext(ctx, "SELECT created_at FROM messages ORDER BY id DESC LIMIT 1").Scan(&latestAt)
	if err != nil && err != sql.ErrNoRows {
		return g, fmt.Errorf("read latest message of %s: %w", id, err)
	}
	g.LatestAt = latestAt.String
	var pending, acked sql.NullInt64
	var response sql.NullFloat64
	err = conn.QueryRowContext(ctx, "SELECT "+
		"SUM(CASE WHEN acknowledged_at IS NULL THEN 1 ELSE 0 END), "+
		"SUM(CASE WHEN acknowledged_at IS NOT NULL AND created_at IS NOT NULL THEN 1 ELSE 0 END), "+
		"SUM(CASE WHEN acknowledged_at IS NOT NULL AND created_at IS NOT NULL "+
		"THEN MAX(0, (julianday(acknowledged_at) - julianday(created_at)) * 86400) ELSE 0 END) "+
		"FROM wakeup_events").Scan(&pending, &acked, &response)
	if err != nil {
		return g, fmt.Errorf("read wakeups of %s: %w", id, err)
	}
	g.Pending, g.Acknowledged, g.ResponseSeconds = pending.Int64, acked.Int64, response.Float64
	tables, err := tableNames(ctx, conn)
	if err != nil {
		return g, err
	}
	query := "SELECT COALESCE(priority, 'normal'), COUNT(*) FROM messages GROUP BY priority"
	if tables["group_message_metrics"] {
		query = "SELECT value, count FROM group_message_metrics WHERE metric = 'priority'"
	}
	rows, err := conn.QueryContext(ctx, query)
	if err != nil {
		return g, fmt.Errorf("read message metrics of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return g, fmt.Errorf("read message metrics of %s: %w", id, err)
		}
		g.Priorities[k] += n
	}
	return g, rows.Err()
}

// readMembers lists members with unread counts, also for group databases
// that predate the unread_count column.
func readMembers(ctx context.Context, q queryer) ([]memberInfo, error) {
	cols, err := columnNames(ctx, q, "group_members")
	if err != nil {
		return nil, err
	}
	query := "SELECT context_id, name, unread_count FROM group_members ORDER BY joined_at"
	if !cols["unread_count"] {
		query = "SELECT group_members.context_id, name, COUNT(member_unread_messages.message_id) FROM group_members " +
			"LEFT JOIN member_unread_messages ON member_unread_messages.context_id = group_members.context_id " +
			"GROUP BY group_members.context_id, name, joined_at ORDER BY joined_at"
	}
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var members []memberInfo
	for rows.Next() {
		var m memberInfo
		var name sql.NullString
		if err := rows.Scan(&m.ContextID, &name, &m.Unread); err != nil {
			return nil, err
		}
		m.Name = name.String
		if m.Name == "" {
			m.Name = m.ContextID
		}
		members = append(members, m)
	}
	return members, rows.Err()
}

// healthRow is one line of the Overview group health table.
type healthRow struct {
	ID         string
	Name       string
	Members    string
	Unread     string
	Pending    string
	Latest     stamp
	State      string
	StateClass string
}

func (o *observer) healthRowOf(g groupSummary) healthRow {
	if g.Unavailable {
		return healthRow{ID: g.ID, Name: "Unavailable group", Members: "—", Unread: "—", Pending: "—",
			Latest: stamp{Text: "Unavailable"}, State: "Unavailable", StateClass: "error"}
	}
	var unread int64
	for _, m := range g.Members {
		unread += m.Unread
	}
	row := healthRow{ID: g.ID, Name: g.Name, Members: fmt.Sprint(len(g.Members)), Unread: fmt.Sprint(unread),
		Pending: fmt.Sprint(g.Pending), Latest: o.stampOf(g.LatestAt, "No activity"), State: "Healthy", StateClass: "ok"}
	switch {
	case g.Pending > 0:
		row.State, row.StateClass = "Needs attention", "attention"
	case unread > 0:
		row.State, row.StateClass = "Unread", "unread"
	}
	return row
}

// overviewGroupRow reads one group's health row, for live row refreshes.
func (o *observer) overviewGroupRow(ctx context.Context, id string) (healthRow, bool) {
	g, err := o.readGroupSummary(ctx, id)
	if err != nil {
		return healthRow{}, false
	}
	return o.healthRowOf(g), true
}

// metric is one headline number.
type metric struct {
	Label string
	Value string
	When  stamp
	Alert bool
}

// activityEvent is one entry of the Overview's live activity stream.
type activityEvent struct {
	Kind      string // message, wakeup, group, success, error
	Badge     string
	Title     string
	GroupName string
	Text      string
	At        stamp
	Attention bool
	when      time.Time
	order     int64
}

// failureRow is one recent failed tool call.
type failureRow struct {
	Tool     string
	Category string
	Duration int64
	At       stamp
}

// overviewView is the Overview fragment.
type overviewView struct {
	Metrics       []metric
	WakeupNote    string
	PriorityNote  string
	AuditEnabled  bool
	AuditSince    stamp
	Events        []activityEvent
	Rows          []healthRow
	Reliability   reliabilityView
	GroupsMissing bool
}

// reliabilityView summarises all audit history.
type reliabilityView struct {
	Available bool
	Calls     int64
	ErrorRate string
	P95       string
	Failures  []failureRow
}

// overviewEventLimit is how many events the live activity stream shows.
const overviewEventLimit = 500

// overviewView collects every group once and derives the whole Overview.
func (o *observer) overviewView(ctx context.Context) overviewView {
	var v overviewView
	ids, exists := discoverGroups(o.dir)
	v.GroupsMissing = !exists
	summaries := make([]groupSummary, 0, len(ids))
	contexts := map[string]bool{}
	priorities := map[string]int64{}
	var groups, messages, pending, acked int64
	var responseSeconds float64
	for _, id := range ids {
		g, err := o.readGroupSummary(ctx, id)
		if err != nil {
			summaries = append(summaries, groupSummary{ID: id, Unavailable: true})
			continue
		}
		summaries = append(summaries, g)
		groups++
		for _, m := range g.Members {
			contexts[m.ContextID] = true
		}
		for k, n := range g.Priorities {
			priorities[k] += n
			messages += n
		}
		pending += g.Pending
		acked += g.Acknowledged
		responseSeconds += g.ResponseSeconds
	}
	for _, g := range summaries {
		v.Rows = append(v.Rows, o.healthRowOf(g))
	}
	sort.SliceStable(v.Rows, func(i, j int) bool {
		hi, hj := v.Rows[i].State == "Healthy", v.Rows[j].State == "Healthy"
		if hi != hj {
			return !hi
		}
		return strings.ToLower(v.Rows[i].Name) < strings.ToLower(v.Rows[j].Name)
	})
	audit, err := o.readAuditSchema(ctx)
	if err != nil {
		audit = nil
	}
	rel := o.reliability(ctx, audit)
	v.Reliability = rel
	toolCalls, errorRate := "—", "—"
	if rel.Available {
		toolCalls, errorRate = fmt.Sprint(rel.Calls), rel.ErrorRate
	}
	response := "—"
	if acked > 0 {
		response = fmt.Sprintf("%.1fs avg", responseSeconds/float64(acked))
	}
	v.Metrics = []metric{
		{Label: "Groups", Value: fmt.Sprint(groups)},
		{Label: "Contexts", Value: fmt.Sprint(len(contexts))},
		{Label: "Messages", Value: fmt.Sprint(messages)},
		{Label: "Tool calls", Value: toolCalls},
		{Label: "Error rate", Value: errorRate, Alert: rel.Available && errorRate != "0.0%"},
		{Label: "Wakeup response", Value: response},
	}
	v.WakeupNote = "No acknowledged wakeups yet"
	if acked == 1 {
		v.WakeupNote = "1 acknowledged wakeup included"
	} else if acked > 1 {
		v.WakeupNote = fmt.Sprintf("%d acknowledged wakeups included", acked)
	}
	keys := make([]string, 0, len(priorities))
	for k := range priorities {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, priorities[k]))
	}
	v.PriorityNote = strings.Join(parts, " · ")
	if meta, ok := auditMetadata(ctx, audit); ok {
		v.AuditEnabled = true
		v.AuditSince = o.stampOf(meta.EnabledAt, "")
	} else if rel.Available {
		v.AuditEnabled = true
	}
	v.Events = o.activity(ctx, summaries, audit)
	return v
}

// activityPage is how many rows one group contributes per round while the
// activity stream is merged; only groups that could still make the cut are
// asked for more.
const activityPage = 50

// activity merges the newest messages and wakeups of every group with the
// newest tool calls, newest first, up to overviewEventLimit. audit is nil
// when the audit database cannot be read.
func (o *observer) activity(ctx context.Context, groups []groupSummary, audit *auditSchema) []activityEvent {
	var events []activityEvent
	type source struct {
		g      groupSummary
		wakeup bool
		before int64
		oldest time.Time
		done   bool
	}
	var sources []*source
	for _, g := range groups {
		if g.Unavailable {
			continue
		}
		sources = append(sources, &source{g: g, before: math.MaxInt64}, &source{g: g, wakeup: true, before: math.MaxInt64})
		if t, ok := parseStamp(g.UpdatedAt); ok {
			events = append(events, activityEvent{Kind: "group", Badge: "Group", Title: "Group", GroupName: g.Name,
				Text: "Group settings or membership changed", At: o.stampOf(g.UpdatedAt, ""), when: t})
		}
	}
	events = append(events, o.toolEvents(ctx, audit)...)
	for {
		var next []*source
		cutoff, full := cutoffOf(events)
		for _, s := range sources {
			if s.done || (full && !s.oldest.IsZero() && s.oldest.Before(cutoff)) {
				continue
			}
			next = append(next, s)
		}
		if len(next) == 0 {
			break
		}
		for _, s := range next {
			page, err := o.activityRows(ctx, s.g, s.wakeup, s.before)
			if err != nil || len(page) < activityPage {
				s.done = true
			}
			if len(page) > 0 {
				s.before = page[len(page)-1].order
				s.oldest = page[len(page)-1].when
			}
			events = append(events, page...)
		}
	}
	sortEvents(events)
	if len(events) > overviewEventLimit {
		events = events[:overviewEventLimit]
	}
	return events
}

// cutoffOf returns the time of the limit-th newest event, once there are that
// many: older rows can no longer enter the stream.
func cutoffOf(events []activityEvent) (time.Time, bool) {
	if len(events) < overviewEventLimit {
		return time.Time{}, false
	}
	sortEvents(events)
	return events[overviewEventLimit-1].when, true
}

func sortEvents(events []activityEvent) {
	sort.SliceStable(events, func(i, j int) bool { return events[i].when.After(events[j].when) })
}

// activityRows reads one page of a group's messages or wakeups below an id.
func (o *observer) activityRows(ctx context.Context, g groupSummary, wakeup bool, before int64) ([]activityEvent, error) {
	db, err := o.dbs.group(o.dir, g.ID)
	if err != nil {
		return nil, err
	}
	var out []activityEvent
	if !wakeup {
		rows, err := db.QueryContext(ctx, "SELECT id, sender_context_id, sender_name, substr(content, 1, 180), created_at FROM messages WHERE id < ? ORDER BY id DESC LIMIT ?", before, activityPage)
		if err != nil {
			return nil, fmt.Errorf("read messages of %s: %w", g.ID, err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var sender, senderName, content, created sql.NullString
			if err := rows.Scan(&id, &sender, &senderName, &content, &created); err != nil {
				return nil, fmt.Errorf("read messages of %s: %w", g.ID, err)
			}
			title := firstNonEmpty(senderName.String, sender.String, "Unknown")
			t, _ := parseStamp(created.String)
			out = append(out, activityEvent{Kind: "message", Badge: "Message", Title: title, GroupName: g.Name,
				Text: content.String, At: o.stampOf(created.String, ""), when: t, order: id})
		}
		return out, rows.Err()
	}
	rows, err := db.QueryContext(ctx, "SELECT id, message_id, context_id, created_at, acknowledged_at FROM wakeup_events WHERE id < ? ORDER BY id DESC LIMIT ?", before, activityPage)
	if err != nil {
		return nil, fmt.Errorf("read wakeups of %s: %w", g.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var messageID sql.NullInt64
		var contextID, created, acked sql.NullString
		if err := rows.Scan(&id, &messageID, &contextID, &created, &acked); err != nil {
			return nil, fmt.Errorf("read wakeups of %s: %w", g.ID, err)
		}
		state := " awaiting acknowledgement"
		if acked.Valid {
			state = " acknowledged"
		}
		t, _ := parseStamp(created.String)
		out = append(out, activityEvent{Kind: "wakeup", Badge: "Wakeup", Title: firstNonEmpty(contextID.String, "Context"),
			GroupName: g.Name, Text: fmt.Sprintf("Wakeup for message #%d%s", messageID.Int64, state),
			At: o.stampOf(created.String, ""), when: t, order: id, Attention: !acked.Valid})
	}
	return out, rows.Err()
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// toolEvents reads the newest audit rows as activity events.
func (o *observer) toolEvents(ctx context.Context, a *auditSchema) []activityEvent {
	if a == nil {
		return nil
	}
	calls, err := o.readToolCalls(ctx, a, auditFilter{}, overviewEventLimit)
	if err != nil {
		return nil
	}
	out := make([]activityEvent, 0, len(calls))
	for _, c := range calls {
		e := activityEvent{Kind: "success", Badge: "Tool success", Title: c.Tool, GroupName: c.GroupLabel,
			Text: fmt.Sprintf("Completed in %d ms", c.Duration), At: c.At, when: c.when}
		if c.GroupID == "" {
			e.GroupName = "MCP"
		}
		if c.Outcome == "error" {
			e.Kind, e.Badge = "error", "Tool error"
			e.Text = fmt.Sprintf("%s · %d ms", errorCategoryLabel(c.Category), c.Duration)
		}
		out = append(out, e)
	}
	return out
}

// auditSchema is the audit database's handle with its table names and the
// columns of tool_calls (empty without that table). A request reads it once
// and passes it to every reader of the audit database, instead of each
// reader opening the file and listing tables again.
type auditSchema struct {
	db      *sql.DB
	tables  map[string]bool
	columns map[string]bool
}

// readAuditSchema opens the audit database and lists its tables and
// tool_calls columns.
func (o *observer) readAuditSchema(ctx context.Context) (*auditSchema, error) {
	db, err := o.dbs.audit(o.dir)
	if err != nil {
		return nil, err
	}
	tables, err := tableNames(ctx, db)
	if err != nil {
		return nil, err
	}
	a := &auditSchema{db: db, tables: tables, columns: map[string]bool{}}
	if tables["tool_calls"] {
		if a.columns, err = columnNames(ctx, db, "tool_calls"); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// auditMeta is the audit database's metadata row.
type auditMeta struct {
	EnabledAt   string
	LastCleanup string
	Retention   string
}

// auditMetadata reads the metadata row; ok is false when auditing was never
// enabled (the file may still hold the group catalog) or a is nil.
func auditMetadata(ctx context.Context, a *auditSchema) (auditMeta, bool) {
	var m auditMeta
	if a == nil {
		return m, false
	}
	db := a.db
	cols, err := columnNames(ctx, db, "metadata")
	if err != nil || len(cols) == 0 {
		return m, false
	}
	retention := "NULL"
	if cols["retention_setting"] {
		retention = "retention_setting"
	}
	var enabled, cleanup, ret sql.NullString
	err = db.QueryRowContext(ctx, "SELECT audit_enabled_at, last_retention_cleanup_at, "+retention+" FROM metadata WHERE id = 1").
		Scan(&enabled, &cleanup, &ret)
	if err != nil {
		return m, false
	}
	return auditMeta{EnabledAt: enabled.String, LastCleanup: cleanup.String, Retention: ret.String}, true
}

// reliability summarises all audit history from the coarsest rollup (or
// the raw rows of a version-1 database) and lists the 100 newest failures.
// a is nil when the audit database cannot be read.
func (o *observer) reliability(ctx context.Context, a *auditSchema) reliabilityView {
	v := reliabilityView{ErrorRate: "—", P95: "—"}
	if a == nil || !a.tables["tool_calls"] {
		return v
	}
	coarsest := auditResolutions[len(auditResolutions)-1]
	agg, hist, _, err := readAggregates(ctx, a, auditFilter{}, coarsest.suffix, coarsest.seconds)
	if err != nil {
		return v
	}
	var calls, errs int64
	for _, a := range agg {
		calls += a.Calls
		errs += a.Errors
	}
	rows, err := a.db.QueryContext(ctx, "SELECT occurred_at, tool_name, duration_ms, error_category FROM tool_calls WHERE outcome = 'error' ORDER BY occurred_at DESC, id DESC LIMIT 100")
	if err != nil {
		return v
	}
	defer rows.Close()
	for rows.Next() {
		var at, tool, category sql.NullString
		var duration sql.NullInt64
		if rows.Scan(&at, &tool, &duration, &category) != nil {
			return v
		}
		v.Failures = append(v.Failures, failureRow{Tool: toolLabel(tool.String), Category: errorCategoryLabel(category.String),
			Duration: duration.Int64, At: o.stampOf(at.String, "")})
	}
	v.Available = true
	v.Calls = calls
	v.ErrorRate = percentText(errs, calls)
	if p, ok := percentile(hist, 0.95); ok {
		v.P95 = fmt.Sprintf("%d ms p95", p)
	}
	return v
}

// latencyCount is one latency histogram bucket: "exact:N" for N ≤ 1000 ms,
// else "log:K" for [2^K, 2^(K+1)) ms, as the audit rollups store them.
type latencyCount struct {
	Bucket string
	Count  int64
}

func readLatency(ctx context.Context, db queryer, query string, args ...any) ([]latencyCount, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read latency histogram: %w", err)
	}
	defer rows.Close()
	var out []latencyCount
	for rows.Next() {
		var l latencyCount
		if err := rows.Scan(&l.Bucket, &l.Count); err != nil {
			return nil, fmt.Errorf("read latency histogram: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// latencyValue is the representative milliseconds of a bucket.
func latencyValue(bucket string) int64 {
	kind, num, _ := strings.Cut(bucket, ":")
	var n int64
	fmt.Sscan(num, &n)
	if kind == "log" {
		return int64(1) << n
	}
	return n
}

// percentile returns the nearest-rank percentile of a histogram.
func percentile(hist []latencyCount, p float64) (int64, bool) {
	var total int64
	for _, h := range hist {
		total += h.Count
	}
	if total == 0 {
		return 0, false
	}
	sorted := append([]latencyCount(nil), hist...)
	sort.Slice(sorted, func(i, j int) bool { return latencyValue(sorted[i].Bucket) < latencyValue(sorted[j].Bucket) })
	target := int64(math.Ceil(float64(total) * p))
	var seen int64
	for _, h := range sorted {
		seen += h.Count
		if seen >= target {
			return latencyValue(h.Bucket), true
		}
	}
	return latencyValue(sorted[len(sorted)-1].Bucket), true
}

func (o *observer) dashboardView(ctx context.Context) dashboardView {
	return dashboardView{CSRFToken: o.csrfToken, Overview: o.overviewView(ctx)}
}

package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
)

// overviewView is the Overview: metrics, activity, group health, reliability.
type overviewView struct {
	Metrics                  []metric
	WakeupNote, PriorityNote string // the footnote's parts
	AuditEnabled             bool
	AuditSince               stamp
	Events                   []activityEvent
	Rows                     []healthRow
	Reliability              reliabilityView
	GroupsMissing            bool
	NetworkFSWarning         string // the start-up warning (observer.fsWarning)
}

// reliabilityView summarises all audit history.
type reliabilityView struct {
	Available      bool
	Calls          int64
	ErrorRate, P95 string
	Failures       []failureRow
}

// serveOverviewGroupRow serves one group's health row for live refreshes,
// or nothing for a group that cannot be read, which the page then drops.
func (o *observer) serveOverviewGroupRow(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("group_id")
	if validateGroupID(id) != nil {
		o.renderPage(w, r, http.StatusBadRequest, "empty", nil)
	} else if g, err := o.readGroupSummary(r.Context(), id); err == nil {
		o.renderPage(w, r, http.StatusOK, "overview-group-row", o.healthRowOf(g))
	} else {
		o.renderPage(w, r, http.StatusOK, "empty", nil)
	}
}

// overviewView collects every group once and derives the whole Overview.
func (o *observer) overviewView(ctx context.Context) overviewView {
	v := overviewView{NetworkFSWarning: o.fsWarning}
	ids, exists := discoverGroups(o.dir)
	v.GroupsMissing = !exists
	summaries := make([]groupSummary, 0, len(ids))
	v.Rows = make([]healthRow, 0, len(ids))
	for _, id := range ids {
		g, err := cachedRead(o, id, "summary", func() (groupSummary, error) { return o.readGroupSummary(ctx, id) })
		if err != nil {
			g = o.unavailableSummary(id)
		}
		summaries, v.Rows = append(summaries, g), append(v.Rows, o.healthRowOf(g))
	}
	// Groups needing a look come first, then by name.
	sort.SliceStable(v.Rows, func(i, j int) bool {
		if hi, hj := v.Rows[i].State == "Healthy", v.Rows[j].State == "Healthy"; hi != hj {
			return !hi
		}
		return strings.ToLower(v.Rows[i].Name) < strings.ToLower(v.Rows[j].Name)
	})
	audit, _ := o.readAuditSchema(ctx) // nil when the audit database cannot be read
	v.Reliability = o.reliability(ctx, audit)
	overviewFigures(&v, summaries)
	if meta, ok := auditMetadata(ctx, audit); ok {
		v.AuditEnabled, v.AuditSince = true, o.stampOf(meta.EnabledAt, "")
	}
	v.AuditEnabled = v.AuditEnabled || v.Reliability.Available
	v.Events = o.activity(ctx, summaries, audit)
	return v
}

// overviewFigures fills the headline numbers and the footnote from the
// readable groups; the audit figures read "—" without audit history.
func overviewFigures(v *overviewView, summaries []groupSummary) {
	var groups, messages, acked int64
	var response float64
	contexts, priorities := map[string]bool{}, map[string]int64{}
	for _, g := range summaries {
		if g.Unavailable {
			continue
		}
		groups++
		for _, m := range g.Members {
			contexts[m.ContextID] = true
		}
		for k, n := range g.Priorities {
			priorities[k] += n
			messages += n
		}
		acked += g.Acknowledged
		response += g.ResponseSeconds
	}
	rel := v.Reliability // its ErrorRate is "—" without audit history
	toolCalls, average := "—", "—"
	if rel.Available {
		toolCalls = fmt.Sprint(rel.Calls)
	}
	v.WakeupNote = "No acknowledged wakeups yet"
	if acked > 0 {
		average = formatDuration(response/float64(acked)) + " avg"
		v.WakeupNote = fmt.Sprintf("%d acknowledged wakeup%s included", acked, map[bool]string{true: "s"}[acked > 1])
	}
	v.Metrics = []metric{
		{Label: "Groups", Value: fmt.Sprint(groups)},
		{Label: "Contexts", Value: fmt.Sprint(len(contexts))},
		{Label: "Messages", Value: fmt.Sprint(messages)},
		{Label: "Tool calls", Value: toolCalls},
		{Label: "Error rate", Value: rel.ErrorRate, Alert: rel.Available && rel.ErrorRate != "0.0%"},
		{Label: "Wakeup response", Value: average},
	}
	parts := mapSlice(slices.Sorted(maps.Keys(priorities)), func(k string) string { return fmt.Sprintf("%s: %d", k, priorities[k]) })
	v.PriorityNote = strings.Join(parts, " · ")
}

// memberInfo is one group member as the dashboard shows it.
type memberInfo struct {
	ContextID, Name string
	Unread          int64
}

// groupSummary is what Overview and a chat's header need from a group.
type groupSummary struct {
	ID, Name, Description              string
	UpdatedAt, LatestAt                string // of the metadata and the newest message
	Members                            []memberInfo
	Pending, WakeupTotal, Acknowledged int64   // wake events
	ResponseSeconds                    float64 // summed over the acknowledged ones
	Priorities                         map[string]int64
	Unavailable                        bool
	Damage                             string // why a damaged (not locked or gone) file is no group
}

// unavailableSummary stands for a group whose summary could not be read,
// asking checkGroupFile why only on this path; a locked or vanished file,
// one this user may not open (another user's group, which doctor leaves in
// place) or one whose -wal and -shm it may not create, is merely unavailable.
func (o *observer) unavailableSummary(id string) groupSummary {
	g := groupSummary{ID: id, Unavailable: true}
	if err := checkGroupFile(groupFile(o.dir, id)); err != nil && !isReadOnly(err) && !isCantOpen(err) {
		if _, statErr := os.Stat(groupFile(o.dir, id)); statErr == nil {
			g.Damage = err.Error()
		}
	}
	return g
}

// readGroupSummary reads one group's summary.
func (o *observer) readGroupSummary(ctx context.Context, id string) (groupSummary, error) {
	g := groupSummary{ID: id, Priorities: map[string]int64{}}
	db, err := o.dbs.group(o.dir, id)
	if err != nil {
		return g, err
	}
	var name, desc, updated, latestAt sql.NullString
	var pending, acked sql.NullInt64
	var response sql.NullFloat64
	err = db.QueryRowContext(ctx, "SELECT (SELECT "+shownName("name")+" FROM group_metadata WHERE id = 1), (SELECT "+shownText("description", chatMessageChars)+" FROM group_metadata WHERE id = 1), "+
		"(SELECT updated_at FROM group_metadata WHERE id = 1), (SELECT created_at FROM messages ORDER BY id DESC LIMIT 1), COUNT(*), "+
		"SUM(CASE WHEN acknowledged_at IS NULL THEN 1 ELSE 0 END), "+
		"SUM(CASE WHEN acknowledged_at IS NOT NULL AND created_at IS NOT NULL THEN 1 ELSE 0 END), "+
		"SUM(CASE WHEN acknowledged_at IS NOT NULL AND created_at IS NOT NULL "+
		"THEN MAX(0, (julianday(acknowledged_at) - julianday(created_at)) * 86400) ELSE 0 END) "+
		"FROM wakeup_events").Scan(&name, &desc, &updated, &latestAt, &g.WakeupTotal, &pending, &acked, &response)
	if err != nil {
		return g, fmt.Errorf("read summary of %s: %w", id, err)
	}
	g.Name, g.Description = cmp.Or(name.String, "Untitled group"), desc.String
	g.UpdatedAt, g.LatestAt = updated.String, latestAt.String
	g.Pending, g.Acknowledged, g.ResponseSeconds = pending.Int64, acked.Int64, response.Float64
	if g.Members, err = readMembers(ctx, db); err != nil {
		return g, fmt.Errorf("read members of %s: %w", id, err)
	}
	if err := readPriorities(ctx, db, g.Priorities); err != nil {
		return g, fmt.Errorf("read message metrics of %s: %w", id, err)
	}
	return g, nil
}

// readPriorities adds message counts by priority into counts, from the
// maintained metrics table when the group has one, else from the messages.
func readPriorities(ctx context.Context, q queryer, counts map[string]int64) error {
	tables, err := tableNames(ctx, q)
	if err != nil {
		return err
	}
	query := "SELECT COALESCE(priority, 'normal'), COUNT(*) FROM messages GROUP BY priority"
	if tables["group_message_metrics"] {
		query = "SELECT value, count FROM group_message_metrics WHERE metric = 'priority'"
	}
	return eachRow(ctx, q, func(row rowScanner) error {
		var k string
		var n int64
		err := row.Scan(&k, &n)
		counts[k] += n
		return err
	}, query)
}

// readMembers lists members with unread counts, also for group databases
// that predate the unread_count column.
func readMembers(ctx context.Context, q queryer) ([]memberInfo, error) {
	cols, err := columnNames(ctx, q, "group_members")
	if err != nil {
		return nil, err
	}
	query := "SELECT context_id, " + shownName("name") + ", unread_count FROM group_members ORDER BY joined_at"
	if !cols["unread_count"] {
		query = "SELECT group_members.context_id, " + shownName("name") + ", COUNT(member_unread_messages.message_id) FROM group_members " +
			"LEFT JOIN member_unread_messages ON member_unread_messages.context_id = group_members.context_id " +
			"GROUP BY group_members.context_id, name, joined_at ORDER BY joined_at"
	}
	return queryAll(ctx, q, func(row rowScanner) (memberInfo, error) {
		var m memberInfo
		var name sql.NullString
		err := row.Scan(&m.ContextID, &name, &m.Unread)
		m.Name = cmp.Or(name.String, m.ContextID)
		return m, err
	}, query)
}

// memberNames maps members' context ids to their names.
func memberNames(members []memberInfo) map[string]string {
	names := make(map[string]string, len(members))
	for _, m := range members {
		names[m.ContextID] = m.Name
	}
	return names
}

// healthRow is one line of the Overview group health table.
type healthRow struct {
	ID, Name                 string
	Members, Unread, Pending string // counts, or "—" for an unavailable group
	Latest                   stamp
	State, StateClass        string
	// Detail explains a damaged row; it is shown on hover of the status.
	Detail string
}

// healthRowOf derives a group's health row; pending wakeups outrank unread.
func (o *observer) healthRowOf(g groupSummary) healthRow {
	if g.Unavailable {
		row := healthRow{ID: g.ID, Name: "Unavailable group", Members: "—", Unread: "—", Pending: "—",
			Latest: stamp{Text: "Unavailable"}, State: "Unavailable", StateClass: "error"}
		if g.Damage != "" {
			row.Name, row.Latest.Text, row.State = "Damaged group file", "Damaged", "Damaged"
			row.Detail = g.Damage + "; run crosstalk-mcp doctor --repair to move it aside"
		}
		return row
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

// metric is one headline number.
type metric struct {
	Label, Value string
	When         stamp
	Alert        bool
}

// failureRow is one recent failed tool call.
type failureRow struct {
	Tool, Category string
	Duration       int64
	At             stamp
}

// reliability summarises all audit history from the coarsest rollup (or
// raw rows) with the 100 newest failures; a is nil without an audit database.
func (o *observer) reliability(ctx context.Context, a *auditSchema) reliabilityView {
	v := reliabilityView{ErrorRate: "—", P95: "—"}
	if a == nil || !a.tables["tool_calls"] {
		return v
	}
	agg, hist, _, err := readAggregates(ctx, a, auditFilter{}, auditCoarsest.suffix, auditCoarsest.seconds)
	if err != nil {
		return v
	}
	var calls, errs int64
	for _, row := range agg {
		calls += row.Calls
		errs += row.Errors
	}
	v.Failures, err = queryAll(ctx, a.db, func(row rowScanner) (failureRow, error) {
		var at, tool, category sql.NullString
		var duration sql.NullInt64
		err := row.Scan(&at, &tool, &duration, &category)
		return failureRow{Tool: toolLabel(tool.String), Category: errorCategoryLabel(category.String),
			Duration: duration.Int64, At: o.stampOf(at.String, "")}, err
	}, "SELECT occurred_at, tool_name, duration_ms, error_category FROM tool_calls WHERE outcome = 'error' ORDER BY occurred_at DESC, id DESC LIMIT 100")
	if err != nil {
		return v
	}
	v.Available, v.Calls = true, calls
	v.ErrorRate, v.P95 = percentText(errs, calls), percentileText(hist, 0.95, "%d ms p95")
	return v
}

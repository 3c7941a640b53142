package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// analyticsView is the Tool analytics fragment.
type analyticsView struct {
	Available  bool
	RangeValue string
	Units      []selectOption
	Tools      []selectOption
	Outcomes   []selectOption
	Callers    []selectOption
	Groups     []selectOption
	Hidden     []hiddenField
	Total      int64
	P50        string
	P95        string
	ErrorRate  string
	ErrorAlert bool
	Tier       string
	ByTool     donutChart
	ByOutcome  donutChart
	OverTime   lineChart
	ByCaller   barChart
	Rows       []toolCallRow
}

// auditFilter narrows audit rows for Tool analytics. Zero values mean "any".
type auditFilter struct {
	From    time.Time
	To      time.Time
	Tool    string
	Outcome string // success, error, or error:<category>
	Caller  string
	Group   string
	Context string
}

// rangeUnits are the rolling-range units, by their short form.
var rangeUnits = []struct{ Key, Name string }{
	{"s", "seconds"}, {"m", "minutes"}, {"h", "hours"}, {"d", "days"}, {"M", "months"}, {"Y", "years"},
}

// rangeUnitKey returns the short form of a range unit given in either form;
// ok is false for an unknown unit.
func rangeUnitKey(unit string) (string, bool) {
	for _, u := range rangeUnits {
		if unit == u.Key || unit == u.Name {
			return u.Key, true
		}
	}
	return "", false
}

// rangeStart returns the start of a rolling range "amount unit" before now.
func rangeStart(amountText, unit string, now time.Time) (time.Time, bool) {
	amount, err := strconv.Atoi(strings.TrimSpace(amountText))
	if err != nil || amount < 1 || amount > 1_000_000 {
		return time.Time{}, false
	}
	unit, ok := rangeUnitKey(unit)
	if !ok {
		return time.Time{}, false
	}
	switch unit {
	case "s":
		return now.Add(-time.Duration(amount) * time.Second), true
	case "m":
		return now.Add(-time.Duration(amount) * time.Minute), true
	case "h":
		return now.Add(-time.Duration(amount) * time.Hour), true
	case "d":
		return now.AddDate(0, 0, -amount), true
	case "M", "Y":
		months := amount
		if unit == "Y" {
			months = amount * 12
		}
		index := now.Year()*12 + int(now.Month()) - 1 - months
		year, month := index/12, time.Month(index%12+1)
		if year < 1 {
			return time.Time{}, false
		}
		day := now.Day()
		if last := time.Date(year, month+1, 0, 0, 0, 0, 0, now.Location()).Day(); day > last {
			day = last
		}
		return time.Date(year, month, day, now.Hour(), now.Minute(), now.Second(), now.Nanosecond(), now.Location()), true
	}
	return time.Time{}, false
}

// chooseTier picks the finest rollup whose 360 buckets cover the range. For
// all history, oldest is the oldest audit row, so a young audit log still
// charts in fine buckets.
func chooseTier(f auditFilter, now, oldest time.Time) (string, int64) {
	if f.From.IsZero() {
		f.From = oldest
	}
	last := auditResolutions[len(auditResolutions)-1]
	if f.From.IsZero() {
		return last.suffix, last.seconds
	}
	end := now
	if !f.To.IsZero() {
		end = f.To
	}
	span := end.Sub(f.From).Seconds()
	for _, r := range auditResolutions {
		if span <= float64(r.seconds*360) {
			return r.suffix, r.seconds
		}
	}
	return last.suffix, last.seconds
}

// outcomeClauses turns an outcome filter into SQL conditions.
func outcomeClauses(outcome string) ([]string, []any) {
	switch {
	case outcome == "success" || outcome == "error":
		return []string{"outcome = ?"}, []any{outcome}
	case strings.HasPrefix(outcome, "error:"):
		return []string{"outcome = 'error'", "error_category = ?"}, []any{strings.TrimPrefix(outcome, "error:")}
	}
	return nil, nil
}

// rollupWhere filters a rollup table; dimensions there store ” for none.
func rollupWhere(f auditFilter, seconds int64) (string, []any) {
	var clauses []string
	var args []any
	if !f.From.IsZero() {
		clauses = append(clauses, "bucket_start + ? > ?")
		args = append(args, seconds, f.From.Unix())
	}
	if !f.To.IsZero() {
		clauses = append(clauses, "bucket_start <= ?")
		args = append(args, f.To.Unix())
	}
	for _, d := range []struct{ col, val string }{{"tool_name", f.Tool}, {"name", f.Caller}, {"group_id", f.Group}, {"context_id", f.Context}} {
		if d.val != "" {
			clauses = append(clauses, d.col+" = ?")
			args = append(args, d.val)
		}
	}
	c, a := outcomeClauses(f.Outcome)
	clauses, args = append(clauses, c...), append(args, a...)
	if len(clauses) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(clauses, " AND "), args
}

// rawWhere filters raw tool_calls rows; cols says which optional columns
// exist (a version-1 database may lack some).
func rawWhere(f auditFilter, cols map[string]bool) (string, []any, bool) {
	var clauses []string
	var args []any
	if !f.From.IsZero() {
		clauses = append(clauses, "occurred_at >= ?")
		args = append(args, formatTimestamp(f.From))
	}
	if !f.To.IsZero() {
		clauses = append(clauses, "occurred_at <= ?")
		args = append(args, formatTimestamp(f.To))
	}
	for _, d := range []struct{ col, val string }{{"tool_name", f.Tool}, {"name", f.Caller}, {"group_id", f.Group}, {"context_id", f.Context}} {
		if d.val == "" {
			continue
		}
		if !cols[d.col] {
			return "", nil, false
		}
		clauses = append(clauses, "tool_calls."+d.col+" = ?")
		args = append(args, d.val)
	}
	c, a := outcomeClauses(f.Outcome)
	clauses, args = append(clauses, c...), append(args, a...)
	if len(clauses) == 0 {
		return "", nil, true
	}
	return " WHERE " + strings.Join(clauses, " AND "), args, true
}

// optionalColumn selects col when it exists, else NULL, so version-1 audit
// databases read with the same query shape.
func optionalColumn(cols map[string]bool, col string) string {
	if cols[col] {
		return "tool_calls." + col
	}
	return "NULL"
}

// toolCallRow is one audit row as the event logs show it.
type toolCallRow struct {
	At         stamp
	Tool       string
	ToolName   string
	Caller     string
	Outcome    string
	Label      string
	Category   string
	GroupID    string
	GroupLabel string
	Deleted    bool
	Duration   int64
	when       time.Time
}

// readToolCalls reads the newest matching audit rows with their group-name
// snapshots, marking rows whose group database is gone.
func (o *observer) readToolCalls(ctx context.Context, a *auditSchema, f auditFilter, limit int) ([]toolCallRow, error) {
	if !a.tables["tool_calls"] {
		return nil, errNoDatabase
	}
	cols := a.columns
	where, args, ok := rawWhere(f, cols)
	if !ok {
		return nil, nil
	}
	groupName, join := "NULL", ""
	if a.tables["tool_call_group_names"] {
		groupName = "tool_call_group_names.group_name"
		join = " LEFT JOIN tool_call_group_names ON tool_call_group_names.tool_call_id = tool_calls.id"
	}
	order := " ORDER BY tool_calls.id DESC"
	if !f.From.IsZero() || !f.To.IsZero() || f.Outcome != "" {
		order = " ORDER BY occurred_at DESC, tool_calls.id DESC"
	}
	query := "SELECT occurred_at, tool_name, " + optionalColumn(cols, "group_id") + ", " +
		optionalColumn(cols, "name") + ", outcome, duration_ms, " + optionalColumn(cols, "error_category") + ", " + groupName +
		" FROM tool_calls" + join + where + order + " LIMIT ?"
	rows, err := a.db.QueryContext(ctx, query, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read tool calls: %w", err)
	}
	defer rows.Close()
	names := map[string]string{}
	deleted := map[string]bool{}
	var out []toolCallRow
	for rows.Next() {
		var r toolCallRow
		var at, tool, group, caller, outcome, category, gname sql.NullString
		var duration sql.NullInt64
		if err := rows.Scan(&at, &tool, &group, &caller, &outcome, &duration, &category, &gname); err != nil {
			return nil, fmt.Errorf("read tool calls: %w", err)
		}
		r.At = o.stampOf(at.String, "")
		r.when, _ = parseStamp(at.String)
		r.ToolName, r.Tool = tool.String, toolLabel(tool.String)
		r.Caller = firstNonEmpty(caller.String, "—")
		r.Outcome, r.Category, r.Duration = outcome.String, category.String, duration.Int64
		r.Label = "Success"
		if r.Outcome != "success" {
			r.Label = errorCategoryLabel(r.Category)
		}
		r.GroupID = group.String
		if r.GroupID != "" {
			gone, ok := deleted[r.GroupID]
			if !ok {
				gone = !groupExists(o.dir, r.GroupID)
				deleted[r.GroupID] = gone
			}
			r.Deleted = gone
			label := gname.String
			if label == "" {
				if n, ok := names[r.GroupID]; ok {
					label = n
				} else if !r.Deleted {
					label = o.groupName(ctx, r.GroupID)
					names[r.GroupID] = label
				} else {
					label = "Deleted group"
				}
			}
			if r.Deleted {
				label += " (deleted)"
			}
			r.GroupLabel = label
		} else {
			r.GroupLabel = "—"
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// selectOption is one <option> of a filter.
type selectOption struct {
	Value    string
	Label    string
	Selected bool
}

// hiddenField carries a filter the form has no control for.
type hiddenField struct {
	Name  string
	Value string
}

// analyticsLogLimit is how many matching calls the event log lists.
const analyticsLogLimit = 500

// analyticsView reads the rollup tier that fits the requested range (or raw
// rows when the audit database predates rollups) and builds the view.
func (o *observer) analyticsView(ctx context.Context, q url.Values) analyticsView {
	now := o.now()
	f := auditFilter{Tool: q.Get("tool_name"), Outcome: q.Get("outcome"), Caller: q.Get("name"), Group: q.Get("group_id"), Context: q.Get("context_id")}
	v := analyticsView{RangeValue: firstNonEmpty(q.Get("range_value"), "0")}
	unit, ok := rangeUnitKey(q.Get("range_unit"))
	if !ok {
		unit = "h"
	}
	for _, u := range rangeUnits {
		v.Units = append(v.Units, selectOption{Value: u.Key, Label: strings.ToUpper(u.Name[:1]) + u.Name[1:], Selected: u.Key == unit})
	}
	if start, ok := rangeStart(v.RangeValue, unit, now); ok {
		f.From = start
	} else if t, ok := parseStamp(q.Get("from")); ok {
		f.From = t
		v.Hidden = append(v.Hidden, hiddenField{"from", q.Get("from")})
	}
	if t, ok := parseStamp(q.Get("to")); ok {
		f.To = t
		v.Hidden = append(v.Hidden, hiddenField{"to", q.Get("to")})
	}
	if f.Context != "" {
		v.Hidden = append(v.Hidden, hiddenField{"context_id", f.Context})
	}
	a, err := o.readAuditSchema(ctx)
	if err != nil {
		a = nil
	}
	o.filterOptions(ctx, &v, f, a)
	if a == nil || !a.tables["tool_calls"] {
		return v
	}
	var oldest time.Time
	if f.From.IsZero() {
		var first sql.NullString
		if a.db.QueryRowContext(ctx, "SELECT MIN(occurred_at) FROM tool_calls").Scan(&first) == nil {
			oldest, _ = parseStamp(first.String)
		}
	}
	tier, seconds := chooseTier(f, now, oldest)
	agg, hist, tier, err := readAggregates(ctx, a, f, tier, seconds)
	if err != nil {
		return v
	}
	v.Tier = tier
	rows, err := o.readToolCalls(ctx, a, f, analyticsLogLimit)
	if err != nil {
		return v
	}
	v.Available = true
	v.Rows = rows
	byTool, byCaller, byOutcome := map[string]int64{}, map[string]int64{}, map[string]int64{}
	byTime := map[int64]int64{}
	var errors int64
	for _, a := range agg {
		v.Total += a.Calls
		errors += a.Errors
		byTool[toolLabel(a.Tool)] += a.Calls
		byCaller[firstNonEmpty(a.Caller, "Unknown caller")] += a.Calls
		byTime[a.Bucket] += a.Calls
		label := "Success"
		if a.Outcome != "success" {
			label = errorCategoryLabel(a.Category)
		}
		byOutcome[label] += a.Calls
	}
	v.ErrorRate, v.ErrorAlert = percentText(errors, v.Total), errors > 0
	v.P50, v.P95 = "—", "—"
	if p, ok := percentile(hist, 0.50); ok {
		v.P50 = fmt.Sprint(p)
	}
	if p, ok := percentile(hist, 0.95); ok {
		v.P95 = fmt.Sprint(p)
	}
	v.ByTool = newDonut("Calls by tool", byTool, nil)
	v.ByOutcome = newDonut("Call outcomes", byOutcome, outcomePalette)
	v.ByCaller = newBarChart("Calls by caller", byCaller)
	v.OverTime = o.newLineChart("Calls over time", byTime, seconds, f, now)
	return v
}

// aggregateRow is one grouped rollup row.
type aggregateRow struct {
	Tool, Caller, Outcome, Category string
	Bucket                          int64
	Calls, Errors                   int64
}

// readAggregates reads aggregates and the latency histogram from one rollup
// tier, or from raw rows when the database lacks that tier's tables; the
// tier it returns is "raw" then.
func readAggregates(ctx context.Context, a *auditSchema, f auditFilter, tier string, seconds int64) ([]aggregateRow, []latencyCount, string, error) {
	if a.tables["analytics_"+tier] && a.tables["analytics_latency_"+tier] {
		agg, hist, err := readRollup(ctx, a.db, f, tier, seconds)
		return agg, hist, tier, err
	}
	agg, hist, err := readRawAggregate(ctx, a, f, seconds)
	return agg, hist, "raw", err
}

// readRollup reads aggregates and the latency histogram from one tier.
func readRollup(ctx context.Context, db *sql.DB, f auditFilter, tier string, seconds int64) ([]aggregateRow, []latencyCount, error) {
	where, args := rollupWhere(f, seconds)
	rows, err := db.QueryContext(ctx, "SELECT tool_name, name, outcome, error_category, bucket_start, SUM(call_count), SUM(error_count) FROM analytics_"+tier+
		where+" GROUP BY tool_name, name, outcome, error_category, bucket_start", args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read analytics_%s: %w", tier, err)
	}
	defer rows.Close()
	var out []aggregateRow
	for rows.Next() {
		var a aggregateRow
		var tool, caller, outcome, category sql.NullString
		if err := rows.Scan(&tool, &caller, &outcome, &category, &a.Bucket, &a.Calls, &a.Errors); err != nil {
			return nil, nil, fmt.Errorf("read analytics_%s: %w", tier, err)
		}
		a.Tool, a.Caller, a.Outcome, a.Category = tool.String, caller.String, outcome.String, category.String
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	hist, err := readLatency(ctx, db, "SELECT latency_bucket, SUM(sample_count) FROM analytics_latency_"+tier+where+" GROUP BY latency_bucket", args...)
	return out, hist, err
}

// readRawAggregate derives the same aggregates from raw rows, for audit
// databases written before rollups existed.
func readRawAggregate(ctx context.Context, a *auditSchema, f auditFilter, seconds int64) ([]aggregateRow, []latencyCount, error) {
	cols := a.columns
	where, args, ok := rawWhere(f, cols)
	if !ok {
		return nil, nil, nil
	}
	rows, err := a.db.QueryContext(ctx, "SELECT tool_name, "+optionalColumn(cols, "name")+", outcome, "+optionalColumn(cols, "error_category")+
		", occurred_at, duration_ms FROM tool_calls"+where, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read tool calls: %w", err)
	}
	defer rows.Close()
	type key struct {
		tool, caller, outcome, category string
		bucket                          int64
	}
	groups := map[key]*aggregateRow{}
	durations := map[string]int64{}
	for rows.Next() {
		var tool, caller, outcome, category, at sql.NullString
		var duration int64
		if err := rows.Scan(&tool, &caller, &outcome, &category, &at, &duration); err != nil {
			return nil, nil, fmt.Errorf("read tool calls: %w", err)
		}
		t, _ := parseStamp(at.String)
		k := key{tool.String, caller.String, outcome.String, category.String, t.Unix() / seconds * seconds}
		a, ok := groups[k]
		if !ok {
			a = &aggregateRow{Tool: k.tool, Caller: k.caller, Outcome: k.outcome, Category: k.category, Bucket: k.bucket}
			groups[k] = a
		}
		a.Calls++
		if k.outcome == "error" {
			a.Errors++
		}
		durations[auditLatencyBucket(duration)]++
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	out := make([]aggregateRow, 0, len(groups))
	for _, a := range groups {
		out = append(out, *a)
	}
	hist := make([]latencyCount, 0, len(durations))
	for b, n := range durations {
		hist = append(hist, latencyCount{Bucket: b, Count: n})
	}
	return out, hist, nil
}

// filterOptions fills the filter menus from the maintained filter values
// (or distinct raw values on older databases), keeping a selected value
// even when it no longer occurs. a is nil when the audit database cannot be
// read.
func (o *observer) filterOptions(ctx context.Context, v *analyticsView, f auditFilter, a *auditSchema) {
	var tools, callers []string
	type group struct{ id, label string }
	var groups []group
	if a != nil && a.tables["tool_calls"] {
		if a.tables["analytics_filter_values"] {
			rows, err := a.db.QueryContext(ctx, "SELECT field, value, label FROM analytics_filter_values WHERE count > 0 ORDER BY label")
			if err == nil {
				for rows.Next() {
					var field, value, label sql.NullString
					if rows.Scan(&field, &value, &label) != nil {
						break
					}
					switch field.String {
					case "tool_name":
						tools = append(tools, value.String)
					case "name":
						callers = append(callers, value.String)
					case "group_id":
						groups = append(groups, group{value.String, label.String})
					}
				}
				rows.Close()
			}
		} else {
			tools = distinct(ctx, a.db, "tool_name")
			if a.columns["name"] {
				callers = distinct(ctx, a.db, "name")
			}
			if a.columns["group_id"] {
				for _, id := range distinct(ctx, a.db, "group_id") {
					groups = append(groups, group{id, ""})
				}
			}
		}
	}
	sort.Strings(tools)
	sort.Strings(callers)
	v.Tools = stringOptions(tools, f.Tool, toolLabel)
	v.Callers = stringOptions(callers, f.Caller, func(s string) string { return s })
	v.Outcomes = []selectOption{{Value: "success", Label: "Success"}, {Value: "error", Label: "Error"}}
	for _, c := range errorCategoryLabels {
		v.Outcomes = append(v.Outcomes, selectOption{Value: "error:" + c.Key, Label: c.Label})
	}
	for i := range v.Outcomes {
		v.Outcomes[i].Selected = v.Outcomes[i].Value == f.Outcome
	}
	found := false
	for _, g := range groups {
		deleted := !groupExists(o.dir, g.id)
		label := g.label
		if label == "" || label == g.id {
			if deleted {
				label = firstNonEmpty(label, "Deleted group")
			} else {
				label = o.groupName(ctx, g.id)
			}
		}
		if deleted {
			label += " (deleted)"
		}
		v.Groups = append(v.Groups, selectOption{Value: g.id, Label: label, Selected: g.id == f.Group})
		found = found || g.id == f.Group
	}
	sort.SliceStable(v.Groups, func(i, j int) bool { return strings.ToLower(v.Groups[i].Label) < strings.ToLower(v.Groups[j].Label) })
	if f.Group != "" && !found {
		v.Groups = append([]selectOption{{Value: f.Group, Label: "Unavailable group (deleted)", Selected: true}}, v.Groups...)
	}
}

func distinct(ctx context.Context, db *sql.DB, col string) []string {
	rows, err := db.QueryContext(ctx, "SELECT DISTINCT "+col+" FROM tool_calls WHERE "+col+" IS NOT NULL AND "+col+" != '' ORDER BY "+col)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if rows.Scan(&s) == nil {
			out = append(out, s)
		}
	}
	return out
}

func stringOptions(values []string, selected string, label func(string) string) []selectOption {
	out := make([]selectOption, 0, len(values)+1)
	found := false
	for _, s := range values {
		out = append(out, selectOption{Value: s, Label: label(s), Selected: s == selected})
		found = found || s == selected
	}
	if selected != "" && !found {
		out = append([]selectOption{{Value: selected, Label: label(selected), Selected: true}}, out...)
	}
	return out
}

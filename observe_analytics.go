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
	ByCaller   topList
	Rows       []toolCallRow
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
	v, f := analyticsRequest(q, now)
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
	// Without a time bound, every total, breakdown and the latency
	// histogram are sums over all buckets, which the coarsest tier holds in
	// a fraction of the rows (the original reads only that tier); the finer
	// tier is then read for the timeline alone, grouped by its primary
	// key's first column, so without a sort.
	sumTier, sumSeconds, split := tier, seconds, false
	if coarsest := auditResolutions[len(auditResolutions)-1]; f.From.IsZero() && f.To.IsZero() && tier != coarsest.suffix &&
		a.tables["analytics_"+coarsest.suffix] && a.tables["analytics_latency_"+coarsest.suffix] && a.tables["analytics_"+tier] {
		sumTier, sumSeconds, split = coarsest.suffix, coarsest.seconds, true
	}
	agg, hist, readTier, err := readAggregates(ctx, a, f, sumTier, sumSeconds)
	if err != nil {
		return v
	}
	if !split {
		tier = readTier
	}
	var timeline map[int64]int64
	if split {
		if timeline, err = readTimeline(ctx, a.db, f, tier, seconds); err != nil {
			return v
		}
	}
	v.Tier = tier
	rows, err := o.readToolCalls(ctx, a, f, analyticsLogLimit)
	if err != nil {
		return v
	}
	v.Available = true
	v.Rows = rows
	o.chartAggregates(&v, agg, hist, timeline, seconds, f, now)
	return v
}

// analyticsRequest reads the filters from the query: a rolling range (or
// explicit from/to), tool, outcome, caller, group and context. It starts
// the view with the range controls and the filters the form cannot show.
func analyticsRequest(q url.Values, now time.Time) (analyticsView, auditFilter) {
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
	return v, f
}

// chartAggregates fills the headline numbers and the four charts. The
// timeline comes from timeline when it is not nil, else from agg's buckets.
func (o *observer) chartAggregates(v *analyticsView, agg []aggregateRow, hist []latencyCount, timeline map[int64]int64, seconds int64, f auditFilter, now time.Time) {
	byTool, byCaller, byOutcome := map[string]int64{}, map[string]int64{}, map[string]int64{}
	byTime := map[int64]int64{}
	var failed int64
	for _, a := range agg {
		v.Total += a.Calls
		failed += a.Errors
		byTool[toolLabel(a.Tool)] += a.Calls
		byCaller[firstNonEmpty(a.Caller, "Unknown caller")] += a.Calls
		byTime[a.Bucket] += a.Calls
		byOutcome[outcomeLabel(a.Outcome, a.Category)] += a.Calls
	}
	v.ErrorRate, v.ErrorAlert = percentText(failed, v.Total), failed > 0
	v.P50, v.P95 = "—", "—"
	if p, ok := percentile(hist, 0.50); ok {
		v.P50 = fmt.Sprint(p)
	}
	if p, ok := percentile(hist, 0.95); ok {
		v.P95 = fmt.Sprint(p)
	}
	v.ByTool = newDonut("Calls by tool", byTool, nil)
	v.ByOutcome = newDonut("Call outcomes", byOutcome, outcomePalette)
	v.ByTool.Category, v.ByOutcome.Category = "Tool", "Outcome"
	v.ByCaller = newTopList("Calls by caller", "calls", byCaller)
	if timeline != nil {
		byTime = timeline
	}
	v.OverTime = o.newLineChart("Calls over time", byTime, seconds, f, now)
}

// filterOptions fills the filter menus, keeping a selected value even when
// it no longer occurs. a is nil when the audit database cannot be read.
func (o *observer) filterOptions(ctx context.Context, v *analyticsView, f auditFilter, a *auditSchema) {
	values := readFilterValues(ctx, a)
	sort.Strings(values.tools)
	sort.Strings(values.callers)
	v.Tools = stringOptions(values.tools, f.Tool, toolLabel)
	v.Callers = stringOptions(values.callers, f.Caller, func(s string) string { return s })
	v.Outcomes = []selectOption{{Value: "success", Label: successLabel}, {Value: "error", Label: "Error"}}
	for _, c := range errorCategories {
		v.Outcomes = append(v.Outcomes, selectOption{Value: "error:" + c.Key, Label: c.Label})
	}
	for i := range v.Outcomes {
		v.Outcomes[i].Selected = v.Outcomes[i].Value == f.Outcome
	}
	labels := o.newGroupLabeler(ctx)
	found := false
	for _, g := range values.groups {
		label, _ := labels.label(g.id, g.label)
		v.Groups = append(v.Groups, selectOption{Value: g.id, Label: label, Selected: g.id == f.Group})
		found = found || g.id == f.Group
	}
	sort.SliceStable(v.Groups, func(i, j int) bool { return strings.ToLower(v.Groups[i].Label) < strings.ToLower(v.Groups[j].Label) })
	if f.Group != "" && !found {
		v.Groups = append([]selectOption{{Value: f.Group, Label: unknownGroupLabel, Selected: true}}, v.Groups...)
	}
}

// filterValues are the values the filter menus offer.
type filterValues struct {
	tools, callers []string
	groups         []struct{ id, label string }
}

// readFilterValues reads the maintained filter values, or distinct raw
// values on databases written before that table existed. a is nil when the
// audit database cannot be read, and then there are none.
func readFilterValues(ctx context.Context, a *auditSchema) filterValues {
	var fv filterValues
	if a == nil || !a.tables["tool_calls"] {
		return fv
	}
	if !a.tables["analytics_filter_values"] {
		fv.tools = distinct(ctx, a.db, "tool_name")
		if a.columns["name"] {
			fv.callers = distinct(ctx, a.db, "name")
		}
		if a.columns["group_id"] {
			for _, id := range distinct(ctx, a.db, "group_id") {
				fv.groups = append(fv.groups, struct{ id, label string }{id, ""})
			}
		}
		return fv
	}
	eachRow(ctx, a.db, func(row rowScanner) error {
		var field, value, label sql.NullString
		if err := row.Scan(&field, &value, &label); err != nil {
			return err
		}
		switch field.String {
		case "tool_name":
			fv.tools = append(fv.tools, value.String)
		case "name":
			fv.callers = append(fv.callers, value.String)
		case "group_id":
			fv.groups = append(fv.groups, struct{ id, label string }{value.String, label.String})
		}
		return nil
	}, "SELECT field, value, label FROM analytics_filter_values WHERE count > 0 ORDER BY label")
	return fv
}

// distinct lists the distinct non-empty values of a tool_calls column.
func distinct(ctx context.Context, db *sql.DB, col string) []string {
	out, _ := queryAll(ctx, db, func(row rowScanner) (string, error) {
		var s string
		return s, row.Scan(&s)
	}, "SELECT DISTINCT "+col+" FROM tool_calls WHERE "+col+" IS NOT NULL AND "+col+" != '' ORDER BY "+col)
	return out
}

// stringOptions makes menu options of values, with the selected one first
// when it is not among them.
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

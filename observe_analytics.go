package main

import (
	"cmp"
	"context"
	"database/sql"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// analyticsView is the Tool analytics fragment.
type analyticsView struct {
	Available                               bool
	RangeValue                              string
	Units, Tools, Outcomes, Callers, Groups []selectOption // the filter menus
	Hidden                                  []hiddenField
	Token                                   string // the token-name filter, typed: no rollup lists the names
	Total                                   int64
	P50, P95, ErrorRate                     string
	ErrorAlert                              bool
	Tier                                    string
	ByTool, ByOutcome                       donutChart
	OverTime                                lineChart
	ByCaller                                topList
	Rows                                    []toolCallRow
}

// rangeUnits are the rolling-range units, by their short form.
var rangeUnits = []struct{ Key, Name string }{
	{"s", "seconds"}, {"m", "minutes"}, {"h", "hours"}, {"d", "days"}, {"M", "months"}, {"Y", "years"},
}

// rangeUnitKey returns the short form of a range unit given in either form.
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
	if d, ok := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]; ok {
		return now.Add(-time.Duration(amount) * d), true
	}
	months := map[string]int{"d": 0, "M": 1, "Y": 12}[unit] * amount
	if months == 0 {
		return now.AddDate(0, 0, -amount), true
	}
	// A month back from the 31st is the last day of the shorter month.
	first := time.Date(now.Year(), now.Month()-time.Month(months), 1,
		now.Hour(), now.Minute(), now.Second(), now.Nanosecond(), now.Location())
	if first.Year() < 1 {
		return time.Time{}, false
	}
	last := time.Date(first.Year(), first.Month()+1, 0, 0, 0, 0, 0, now.Location()).Day()
	return first.AddDate(0, 0, min(now.Day(), last)-1), true
}

// chooseTier picks the finest rollup whose 360 buckets cover the range; all
// history starts at the oldest audit row, so a young log charts finely.
func chooseTier(f auditFilter, now, oldest time.Time) (string, int64) {
	from, end := cmp.Or(f.From, oldest), cmp.Or(f.To, now)
	for _, r := range auditResolutions {
		if !from.IsZero() && end.Sub(from).Seconds() <= float64(r.seconds*360) {
			return r.suffix, r.seconds
		}
	}
	return auditCoarsest.suffix, auditCoarsest.seconds
}

// selectOption is one <option> of a filter.
type selectOption struct {
	Value, Label string
	Selected     bool
}

// hiddenField carries a filter the form has no control for.
type hiddenField struct {
	Name, Value string
}

// analyticsLogLimit is how many matching calls the event log lists.
const analyticsLogLimit = 500

// analyticsView reads the rollup tier that fits the requested range (or raw
// rows when the audit database predates rollups) and builds the view.
func (o *observer) analyticsView(ctx context.Context, q url.Values) analyticsView {
	now := o.now()
	v, f := analyticsRequest(q, now)
	a, _ := o.readAuditSchema(ctx) // nil when the audit database cannot be read
	o.filterOptions(ctx, &v, f, a)
	if a == nil || !a.tables["tool_calls"] {
		return v
	}
	var first sql.NullString // stays NULL on an error, which then charts coarsely
	if f.From.IsZero() {
		a.db.QueryRowContext(ctx, "SELECT MIN(occurred_at) FROM tool_calls").Scan(&first)
	}
	oldest, _ := parseStamp(first.String)
	tier, seconds := chooseTier(f, now, oldest)
	// Without a time bound, the sums come from the coarsest tier's fewer
	// rows and the finer tier gives only the timeline, grouped by its key's
	// first column and so unsorted: 80 ms at scale, against 420 ms.
	sumTier, sumSeconds, split := tier, seconds, false
	if f.From.IsZero() && f.To.IsZero() && f.Token == "" && tier != auditCoarsest.suffix && a.tables["analytics_"+tier] &&
		a.tables["analytics_"+auditCoarsest.suffix] && a.tables["analytics_latency_"+auditCoarsest.suffix] {
		sumTier, sumSeconds, split = auditCoarsest.suffix, auditCoarsest.seconds, true
	}
	agg, hist, readTier, err := readAggregates(ctx, a, f, sumTier, sumSeconds)
	var timeline map[int64]int64
	if !split {
		tier = readTier
	} else if err == nil {
		timeline, err = readTimeline(ctx, a.db, f, tier, seconds)
	}
	if err == nil {
		v.Rows, err = o.readToolCalls(ctx, a, f, analyticsLogLimit)
	}
	if err != nil {
		return v
	}
	v.Available, v.Tier = true, tier
	o.chartAggregates(&v, agg, hist, timeline, seconds, f, now)
	return v
}

// analyticsRequest reads the filters from the query and starts the view
// with the range controls and the filters the form cannot show.
func analyticsRequest(q url.Values, now time.Time) (analyticsView, auditFilter) {
	f := auditFilter{Tool: q.Get("tool_name"), Outcome: q.Get("outcome"), Caller: q.Get("name"), Group: q.Get("group_id"), Context: q.Get("context_id"),
		Token: strings.TrimSpace(q.Get("token_name"))}
	v := analyticsView{RangeValue: firstNonEmpty(q.Get("range_value"), "0"), Token: f.Token}
	unit, _ := rangeUnitKey(q.Get("range_unit"))
	unit = cmp.Or(unit, "h") // a missing or unknown unit reads as hours
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

// chartAggregates fills the headline numbers and the four charts, the
// timeline from timeline unless it is nil.
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
	v.P50, v.P95 = percentileText(hist, 0.50, "%d"), percentileText(hist, 0.95, "%d")
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
// it no longer occurs; with a nil a (no audit database) they offer only the
// outcomes and the selection.
func (o *observer) filterOptions(ctx context.Context, v *analyticsView, f auditFilter, a *auditSchema) {
	var tools, callers, groups []selectOption
	if a != nil && a.tables["tool_calls"] {
		eachRow(ctx, a.db, func(row rowScanner) error {
			var field, value, label sql.NullString
			if err := row.Scan(&field, &value, &label); err != nil {
				return err
			}
			switch field.String {
			case "tool_name":
				tools = append(tools, selectOption{Value: value.String, Label: toolLabel(value.String)})
			case "name":
				callers = append(callers, selectOption{Value: value.String, Label: value.String})
			case "group_id":
				name, _ := o.groupLabel(ctx, value.String, label.String)
				groups = append(groups, selectOption{Value: value.String, Label: name})
			}
			return nil
		}, filterValuesQuery(a))
	}
	byValue := func(a, b selectOption) int { return strings.Compare(a.Value, b.Value) }
	slices.SortStableFunc(tools, byValue)
	slices.SortStableFunc(callers, byValue)
	slices.SortStableFunc(groups, func(a, b selectOption) int {
		return strings.Compare(strings.ToLower(a.Label), strings.ToLower(b.Label))
	})
	v.Tools = withSelection(tools, f.Tool, toolLabel(f.Tool))
	v.Callers = withSelection(callers, f.Caller, f.Caller)
	v.Groups = withSelection(groups, f.Group, unknownGroupLabel)
	outcome := func(value, label string) selectOption { return selectOption{value, label, value == f.Outcome} }
	v.Outcomes = []selectOption{outcome("success", successLabel), outcome("error", "Error")}
	for _, c := range errorCategories {
		v.Outcomes = append(v.Outcomes, outcome("error:"+c.Key, c.Label))
	}
}

// filterValuesQuery selects the menus' (field, value, label) rows: the
// maintained filter values, or distinct raw ones on an older database.
func filterValuesQuery(a *auditSchema) string {
	if a.tables["analytics_filter_values"] {
		return "SELECT field, value, label FROM analytics_filter_values WHERE count > 0 ORDER BY label"
	}
	var parts []string
	for _, col := range []string{"tool_name", "name", "group_id"} {
		if col == "tool_name" || a.columns[col] {
			parts = append(parts, "SELECT DISTINCT '"+col+"', "+col+", NULL FROM tool_calls WHERE "+col+" IS NOT NULL AND "+col+" != ''")
		}
	}
	return strings.Join(parts, " UNION ALL ") + " ORDER BY 1, 2"
}

// withSelection marks the selected option, and puts it first under the
// label missing when it is not among opts.
func withSelection(opts []selectOption, selected, missing string) []selectOption {
	for i := range opts {
		opts[i].Selected = opts[i].Value == selected
	}
	if selected != "" && !slices.ContainsFunc(opts, func(o selectOption) bool { return o.Selected }) {
		opts = append([]selectOption{{Value: selected, Label: missing, Selected: true}}, opts...)
	}
	return opts
}

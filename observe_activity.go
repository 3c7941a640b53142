package main

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"time"
)

// activityEvent is one entry of the Overview's live activity stream.
type activityEvent struct {
	Kind                          string // message, wakeup, group, success, error
	Badge, Title, GroupName, Text string
	At                            stamp
	Attention                     bool
	when                          time.Time
	order                         int64
}

// overviewEventLimit is how many events the live activity stream shows.
const overviewEventLimit = 500

// activityPage is how many rows one group's messages or wakeups contribute
// per round of the activity merge.
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
	// Each round reads the next page of every source that may still reach
	// the stream, until none may: once the stream is full, one whose last
	// page ended before the stream's oldest event cannot. Events past the
	// limit are dropped each round, since no later round brings them back,
	// so each round sorts a few hundred events rather than all read so far.
	for reading := true; reading; {
		reading = false
		events = newestEvents(events)
		full := len(events) == overviewEventLimit
		for _, s := range sources {
			if s.done || full && !s.oldest.IsZero() && s.oldest.Before(events[overviewEventLimit-1].when) {
				continue
			}
			reading = true
			page, err := o.cachedActivityRows(ctx, s.g, s.wakeup, s.before)
			s.done = err != nil || len(page) < activityPage
			if len(page) > 0 {
				s.before, s.oldest = page[len(page)-1].order, page[len(page)-1].when
			}
			events = append(events, page...)
		}
	}
	return newestEvents(events)
}

// newestEvents orders events newest first, keeping ties in place, and keeps
// the overviewEventLimit newest.
func newestEvents(events []activityEvent) []activityEvent {
	sort.SliceStable(events, func(i, j int) bool { return events[i].when.After(events[j].when) })
	return events[:min(len(events), overviewEventLimit)]
}

// activityRows reads one page of a group's messages or wakeups below an id.
func (o *observer) activityRows(ctx context.Context, g groupSummary, wakeup bool, before int64) ([]activityEvent, error) {
	db, err := o.dbs.group(o.dir, g.ID)
	if err != nil {
		return nil, err
	}
	query, what := "SELECT id, created_at, sender_name, sender_context_id, substr(content, 1, 180) FROM messages", "messages"
	if wakeup {
		query, what = "SELECT id, created_at, context_id, acknowledged_at, COALESCE(message_id, 0) FROM wakeup_events", "wakeups"
	}
	// A wakeup's title is its target's member name; the id only for one
	// who has left the group since.
	names := memberNames(g.Members)
	out, err := queryAll(ctx, db, func(row rowScanner) (activityEvent, error) {
		var id int64
		var created, a, b, c sql.NullString
		if err := row.Scan(&id, &created, &a, &b, &c); err != nil {
			return activityEvent{}, err
		}
		e := activityEvent{Kind: "message", Badge: "Message", Title: firstNonEmpty(a.String, b.String, "Unknown"), GroupName: g.Name,
			Text: c.String, At: o.stampOf(created.String, ""), order: id}
		e.when, _ = parseStamp(created.String)
		if wakeup {
			state := map[bool]string{false: " awaiting acknowledgement", true: " acknowledged"}[b.Valid]
			e.Kind, e.Badge, e.Title = "wakeup", "Wakeup", firstNonEmpty(names[a.String], a.String, "Context")
			e.Text, e.Attention = "Wakeup for message #"+c.String+state, !b.Valid
		}
		return e, nil
	}, query+" WHERE id < ? ORDER BY id DESC LIMIT ?", before, activityPage)
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", what, g.ID, err)
	}
	return out, nil
}

// toolEvents reads the newest audit rows as activity events.
func (o *observer) toolEvents(ctx context.Context, a *auditSchema) []activityEvent {
	if a == nil {
		return nil
	}
	calls, _ := o.readToolCalls(ctx, a, auditFilter{}, overviewEventLimit) // none on an error
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

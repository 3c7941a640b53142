package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// eventHub fans live dashboard events out to every open /events stream.
// Publishing never blocks: events are refresh hints, not a durable log, so a
// subscriber whose buffer is full is dropped and reconnects for a snapshot.
type eventHub struct {
	// mu guards subs, nil once the hub is closed; it is held only for
	// non-blocking sends.
	mu   sync.Mutex
	subs map[chan []byte]struct{} // the streams' queues, closed when dropped
}

// subscriberBuffer bounds how far one browser may lag before it is dropped.
const subscriberBuffer = 32

// subscribe registers a new stream, already closed if the hub is.
func (h *eventHub) subscribe() chan []byte {
	s := make(chan []byte, subscriberBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		close(s)
	} else {
		h.subs[s] = struct{}{}
	}
	return s
}

// unsubscribe ends s's stream if it is still registered.
func (h *eventHub) unsubscribe(s chan []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s)
	}
}

// publish queues one event for every subscriber without waiting on any.
func (h *eventHub) publish(event string, payload any) {
	data := encodeEvent(event, payload)
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s <- data:
		default:
			delete(h.subs, s)
			close(s)
		}
	}
}

// close ends every stream so that server shutdown need not wait for browsers.
func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		close(s)
	}
	h.subs = nil
}

// encodeEvent renders one server-sent event with compact JSON data; the
// payloads, maps of strings, numbers and pointers to them, always encode.
func encodeEvent(event string, payload any) []byte {
	data, _ := json.Marshal(payload)
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, data)
}

// serveEvents streams server-sent events: a snapshot, then live changes.
func (o *observer) serveEvents(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead { // a HEAD request has headers, never a stream to hold open
		return
	}
	sub := o.hub.subscribe()
	defer o.hub.unsubscribe(sub)
	flusher := http.NewResponseController(w)
	send := func(data []byte) bool { // false when the client is gone or cannot stream
		_, err := w.Write(data)
		return err == nil && flusher.Flush() == nil
	}
	// The retry hint keeps reconnection quick after a drop.
	if !send(append([]byte("retry: 1000\n\n"), encodeEvent("snapshot", o.snapshot())...)) {
		return
	}
	// A comment line every 15 s detects dead clients behind idle connections.
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			if !send([]byte(": keep-alive\n\n")) {
				return
			}
		case ev, ok := <-sub:
			if !ok || !send(ev) {
				return
			}
		}
	}
}

// revisions are a group's four group_state counters, which writers bump by
// what they changed: two readings tell the poller which events to publish.
type revisions struct {
	message, member, wakeup, metadata int64
}

// pollLoop polls every interval until ctx ends.
func (o *observer) pollLoop(ctx context.Context) {
	ticker := time.NewTicker(o.pollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			o.pollOnce()
		}
	}
}

// pollOnce publishes one event per change of each group's revision counters
// and the newest audit id since the previous poll; an unreadable group
// (locked, half-written) is compared again next time.
func (o *observer) pollOnce() {
	ids, dirExists := discoverGroups(o.dir)
	for _, id := range ids {
		o.pollGroup(id)
	}
	// A missing directory can be a remount in progress; only a missing file
	// in an existing directory means the group was deleted.
	for id := range o.markers {
		if _, found := slices.BinarySearch(ids, id); dirExists && !found { // ids are sorted
			delete(o.markers, id)
			delete(o.signatures, id)
			o.reads.forget(id)
			o.dbs.forget(groupFile(o.dir, id))
			o.hub.publish("group.deleted", map[string]any{"group_id": id})
		}
	}
	// An unreadable audit file is compared again next time, but ends the baseline.
	if latest, _, err := o.dbs.latestAuditID(o.dir); err == nil {
		if o.polled && latest != o.latestAudit { // 0 too, once the history is deleted: the views must drop it
			o.hub.publish("tool_call.completed", map[string]any{"tool_call_id": latest})
		}
		o.latestAudit = latest // 0 without audit rows
	}
	o.polled = true
}

// pollGroup publishes the changes of one group since the previous poll,
// skipping without opening it a group whose files are unchanged.
func (o *observer) pollGroup(id string) {
	sig, sigOK := readGroupSignature(groupFile(o.dir, id), time.Now())
	if prev, known := o.signatures[id]; sigOK && known && sig.unchangedSince(prev) {
		return
	}
	delete(o.signatures, id)
	state, err := o.dbs.groupState(o.dir, id)
	if err != nil {
		return
	}
	prev, known := o.markers[id]
	now := state.marker
	o.markers[id] = now
	if sigOK {
		o.signatures[id] = sig
	}
	group := map[string]any{"group_id": id}
	if !known {
		if o.polled { // news to open pages after the baseline
			o.hub.publish("group.changed", group)
		}
		return
	}
	if now.message != prev.message {
		o.hub.publish("message.created", map[string]any{"group_id": id, "message_id": state.latest})
	}
	for _, c := range []struct {
		changed bool
		event   string
	}{{now.member != prev.member, "member.changed"}, {now.wakeup != prev.wakeup, "wakeup.changed"}, {now.metadata != prev.metadata, "group.changed"}} {
		if c.changed {
			o.hub.publish(c.event, group)
		}
	}
}

// snapshot starts every event stream, so that a (re)connecting browser can
// reconcile what it shows without a replay.
func (o *observer) snapshot() map[string]any {
	groups := map[string]any{}
	ids, _ := discoverGroups(o.dir)
	for _, id := range ids {
		state, err := cachedRead(o, id, "snapshot", func() (snapshotState, error) { return o.dbs.groupState(o.dir, id) })
		if err != nil {
			continue
		}
		groups[id] = map[string]any{
			"latest_message_id":  state.latest,
			"member_fingerprint": strconv.FormatInt(state.marker.member, 10),
			"wakeup_fingerprint": strconv.FormatInt(state.marker.wakeup, 10),
		}
	}
	var audit any
	if latest, ok, err := o.dbs.latestAuditID(o.dir); err == nil && ok {
		audit = latest
	}
	return map[string]any{"groups": groups, "latest_audit_id": audit}
}

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
	// the stream: once it is full, one whose last page ended before its
	// oldest event cannot. Events past the limit are dropped each round, as
	// no later round brings them back, so a round sorts only a few hundred.
	for reading := true; reading; {
		reading = false
		events = newestEvents(events)
		full := len(events) == overviewEventLimit
		for _, s := range sources {
			if s.done || full && !s.oldest.IsZero() && s.oldest.Before(events[overviewEventLimit-1].when) {
				continue
			}
			reading = true
			page, err := cachedRead(o, s.g.ID, activityPageKey{s.wakeup, s.before}, func() ([]activityEvent, error) {
				return o.activityRows(ctx, s.g, s.wakeup, s.before)
			})
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
	slices.SortStableFunc(events, func(a, b activityEvent) int { return b.when.Compare(a.when) })
	return events[:min(len(events), overviewEventLimit)]
}

// activityRows reads one page of a group's messages or wakeups below an id.
func (o *observer) activityRows(ctx context.Context, g groupSummary, wakeup bool, before int64) ([]activityEvent, error) {
	db, err := o.dbs.group(o.dir, g.ID)
	if err != nil {
		return nil, err
	}
	query, what := "SELECT id, created_at, "+shownName("sender_name")+", sender_context_id, "+shownText("content", 180)+" FROM messages", "messages"
	if wakeup {
		query, what = "SELECT id, created_at, context_id, acknowledged_at, COALESCE(message_id, 0) FROM wakeup_events", "wakeups"
	}
	names := memberNames(g.Members) // a wakeup's title; the id for one who left
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
	if a == nil || !a.tables["tool_calls"] {
		return nil
	}
	calls, _ := o.readToolCalls(ctx, a, auditFilter{}, overviewEventLimit) // none on an error
	return mapSlice(calls, func(c toolCallRow) activityEvent {
		e := activityEvent{Kind: "success", Badge: "Tool success", Title: c.Tool, GroupName: c.GroupLabel,
			Text: fmt.Sprintf("Completed in %d ms", c.Duration), At: c.At, when: c.when}
		if c.GroupID == "" {
			e.GroupName = "MCP"
		}
		if c.Outcome == "error" {
			e.Kind, e.Badge = "error", "Tool error"
			e.Text = fmt.Sprintf("%s · %d ms", errorCategoryLabel(c.Category), c.Duration)
		}
		return e
	})
}

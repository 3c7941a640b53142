package main

import (
	"context"
	"errors"
	"math/bits"
	"slices"
	"strings"
)

// sendBatch is one or more sends to a group written in one transaction. The
// FTS5 triggers on messages write an index segment at every statement
// boundary (one per message was about half a pipelined send's CPU), so a
// batch inserts all its messages with one multi-row INSERT and then does
// each message's other writes in order. The rows are those of one-by-one
// sends and the schema is untouched, so the original sees nothing new.
type sendBatch struct {
	tx groupTx
	id string
	// now is the store's clock in the on-disk format.
	now func() string
}

// routedSend is one message of a batch between routing and writing.
type routedSend struct {
	msg    outgoing
	others []recipient
	route  routing
	ids    []string // wakeup target ids, in routing order
	now    string
}

// maxInsertRows bounds the rows of one multi-row INSERT (insertRows), five
// or eight parameters each, below SQLite's 32,766 bound parameters.
const maxInsertRows = 2048

// insertRows runs the INSERT head followed by the rows of args, width
// values each, and returns the rowid of the last row. The rows go a power of
// two at a time, so that a handle caches at most 12 statements of head
// (groupTx.stmt), not one per batch size.
func (t groupTx) insertRows(head string, width int, args []any) (last int64, err error) {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", width), ", ") + "), "
	for len(args) > 0 {
		n := width << (bits.Len(uint(min(len(args)/width, maxInsertRows))) - 1)
		res, err := t.Exec(head+strings.TrimSuffix(strings.Repeat(tuple, n/width), ", "), args[:n]...)
		if err != nil {
			return 0, err
		}
		if last, err = res.LastInsertId(); err != nil {
			return 0, err
		}
		args = args[n:]
	}
	return last, nil
}

// sendMessages stores msgs, in order, in one transaction that other sends of
// this process to group id may share (sendQueued). A message refused for its
// sender (errs[i], a *domainError) writes nothing and leaves the others to
// commit; any other failure rolls all back and is returned as err. A busy
// group is retried for busyRetryWindow from this call, then answered
// errGroupBusy. A call whose ctx ends before its COMMIT stores nothing and
// returns ctx's cause: a client that gave up must not find its message stored.
func (s *store) sendMessages(ctx context.Context, id string, msgs []outgoing) (outs []sent, errs []error, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, busyRetryWindow, errGroupBusy)
	defer cancel()
	var q *queuedSend
	err = retryBusyContext(ctx, func() error {
		return s.withHandle(id, func(h *groupHandle) error {
			// A fresh entry for each attempt: a failed one stored nothing.
			q = &queuedSend{ctx: ctx, msgs: msgs, done: make(chan struct{})}
			h.sendQueued(s, id, q)
			return q.err
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return q.outs, q.errs, nil
}

// queuedSend is one call's sends waiting in a group handle's queue, and,
// once done is closed, their results.
type queuedSend struct {
	ctx  context.Context
	msgs []outgoing
	outs []sent
	errs []error
	err  error
	done chan struct{}
}

// maxSharedSends bounds the messages of one shared transaction, so that the
// sends at the front of the queue are answered within a few milliseconds.
const maxSharedSends = 256

// sendQueued stores q through h and returns once it is answered. A commit
// costs one fsync however many messages share it, so a send joins the
// handle's queue and waits for writeTurn; the sender that gets it stores
// every send queued by then in one transaction. A send whose ctx ends while
// it waits leaves the queue, unless a transaction has taken it.
func (h *groupHandle) sendQueued(s *store, id string, q *queuedSend) {
	h.sendsMu.Lock()
	h.sends = append(h.sends, q)
	h.sendsMu.Unlock()
	select {
	case <-q.done:
		return
	case <-q.ctx.Done():
		if h.unqueue(q) {
			q.err = context.Cause(q.ctx)
		} else {
			<-q.done
		}
		return
	case h.writeTurn <- struct{}{}:
	}
	defer func() { <-h.writeTurn }()
	for {
		select {
		case <-q.done:
			return
		default:
		}
		if batch := h.takeQueued(); len(batch) > 0 {
			h.storeQueued(s, id, batch)
		}
	}
}

// unqueue removes q from h's queue and reports whether it was still there.
func (h *groupHandle) unqueue(q *queuedSend) bool {
	h.sendsMu.Lock()
	defer h.sendsMu.Unlock()
	i := slices.Index(h.sends, q)
	if i >= 0 {
		h.sends = slices.Delete(h.sends, i, i+1)
	}
	return i >= 0
}

// takeQueued removes from h's queue the sends of one transaction, oldest
// first, and answers those whose ctx ended with its cause instead. The
// caller holds writeTurn.
func (h *groupHandle) takeQueued() []*queuedSend {
	h.sendsMu.Lock()
	defer h.sendsMu.Unlock()
	var taken []*queuedSend
	n, i := 0, 0
	for ; i < len(h.sends) && (n == 0 || n+len(h.sends[i].msgs) <= maxSharedSends); i++ {
		if q := h.sends[i]; !q.ended() {
			taken, n = append(taken, q), n+len(q.msgs)
		}
	}
	h.sends = slices.Delete(h.sends, 0, i) // clears the taken entries, whose texts a shared array would keep
	return taken
}

// ended reports whether q's ctx has ended and, if so, answers q with its cause.
func (q *queuedSend) ended() bool {
	if q.ctx.Err() == nil {
		return false
	}
	q.err = context.Cause(q.ctx)
	close(q.done)
	return true
}

// gaveUp reports whether q's caller ended it (requestEnded).
func (q *queuedSend) gaveUp() bool { return requestEnded(q.ctx) }

// requestEnded reports whether the request of a write in progress ended
// (its client cancelled it or went away). The busy window ending does not
// count once the write has the lock: it bounds the wait for the lock, and
// a message of hundreds of megabytes takes seconds to index.
func requestEnded(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), errGroupBusy)
}

// errSendEnded rolls back a shared transaction in which a send's ctx ended
// before COMMIT; the others are stored again without it.
var errSendEnded = errors.New("a send's request ended before its commit")

// storeQueued writes the sends of batch in one transaction on h, whose
// writeTurn the caller holds, and answers them. A shared transaction that
// fails other than busy is retried one call at a time, so each gets the
// answer it would have got alone; busy goes to all, each retrying in its
// own window.
func (h *groupHandle) storeQueued(s *store, id string, batch []*queuedSend) {
	all := slices.Concat(mapSlice(batch, func(q *queuedSend) []outgoing { return q.msgs })...)
	var outs []sent
	var errs []error
	err := h.writeLocked(func(tx groupTx) (err error) {
		outs, errs, err = sendBatch{tx: tx, id: id, now: s.timestamp}.write(all)
		if err == nil && slices.ContainsFunc(batch, (*queuedSend).gaveUp) {
			err = errSendEnded // checked right before COMMIT
		}
		return err
	})
	if errors.Is(err, errSendEnded) {
		if batch = slices.DeleteFunc(batch, func(q *queuedSend) bool { return q.gaveUp() && q.ended() }); len(batch) > 0 {
			h.storeQueued(s, id, batch)
		}
		return
	}
	if err != nil && len(batch) > 1 && !isBusy(err) {
		for _, q := range batch {
			h.storeQueued(s, id, []*queuedSend{q})
		}
		return
	}
	for _, q := range batch {
		if q.err = err; err == nil {
			n := len(q.msgs)
			q.outs, q.errs, outs, errs = outs[:n], errs[:n], outs[n:], errs[n:]
		}
		close(q.done)
	}
}

// write stores msgs in order and returns each one's result or refusal. A
// refusal (not joined, wrong name) is decided from one read of the members,
// which sends never change. Routing is decided before the INSERT, where the
// original updates the row after it; the row ends the same.
func (b sendBatch) write(msgs []outgoing) (outs []sent, errs []error, err error) {
	// Every member, in the table's natural order, which the original's
	// routing order follows.
	rows, err := b.tx.Query("SELECT context_id, name FROM group_members")
	members, err := collectRows(rows, err, func(row rowScanner) (r recipient, err error) {
		return r, row.Scan(&r.contextID, &r.name)
	})
	if err != nil {
		return nil, nil, err
	}
	outs, errs = make([]sent, len(msgs)), make([]error, len(msgs))
	var pending []routedSend
	var index []int // index[k] is the position in msgs of pending[k]
	for i, m := range msgs {
		p, err := b.routed(members, m)
		if err != nil {
			errs[i] = err
			continue
		}
		pending = append(pending, p)
		index = append(index, i)
	}
	if len(pending) == 0 {
		return outs, errs, nil
	}
	first, err := b.insertMessages(pending)
	if err == nil {
		err = b.fanOut(pending, first)
	}
	for k, p := range pending {
		outs[index[k]] = sent{groupID: b.id, priority: p.msg.priority, messageID: first + int64(k), mentions: p.route.mentions,
			routingReason: p.route.reason, wakeupTargets: p.ids}
	}
	return outs, errs, err
}

// routed checks that m's sender is a member under its name and routes m
// among the others.
func (b sendBatch) routed(members []recipient, m outgoing) (routedSend, error) {
	i := slices.IndexFunc(members, func(r recipient) bool { return r.contextID == m.contextID })
	if i < 0 {
		return routedSend{}, errNotJoined
	}
	if members[i].name != m.name {
		return routedSend{}, errNameMismatch
	}
	others := slices.Concat(members[:i], members[i+1:])
	r := route(others, m.text, m.priority, m.wake)
	ids := mapSlice(r.targets, func(t target) string { return t.contextID })
	return routedSend{msg: m, others: others, route: r, ids: ids, now: b.now()}, nil
}

// insertMessages inserts the messages of pending and returns the id of the
// first. The ids are consecutive: the transaction holds the write lock and
// messages.id is AUTOINCREMENT.
func (b sendBatch) insertMessages(pending []routedSend) (int64, error) {
	args := make([]any, 0, 8*len(pending))
	for _, p := range pending {
		args = append(args, p.msg.contextID, p.msg.name, p.msg.text, p.now, p.msg.priority,
			pyJSON(stringList(p.route.mentions)), pyJSON(stringList(p.ids)), p.route.reason)
	}
	last, err := b.tx.insertRows("INSERT INTO messages(sender_context_id, sender_name, content, created_at, priority, "+
		"mentions, wakeup_targets, routing_reason) VALUES ", 8, args)
	return last - int64(len(pending)) + 1, err
}

// fanOut makes the rest of the writes of pending, whose messages have the ids
// first, first+1, …: unread rows, member counters, wake events, metrics and
// revisions, one statement each. Rows are inserted in the order one-by-one
// sends insert them, so they get the same rowids.
func (b sendBatch) fanOut(pending []routedSend, first int64) error {
	tx, last := b.tx, first+int64(len(pending))-1
	if err := recordTokenNames(tx, pending, first); err != nil {
		return err
	}
	if _, err := tx.Exec("INSERT INTO member_unread_messages(context_id, message_id) SELECT group_members.context_id, messages.id "+
		"FROM messages JOIN group_members ON group_members.context_id != messages.sender_context_id "+
		"WHERE messages.id BETWEEN ?1 AND ?2 ORDER BY messages.id, group_members.rowid", first, last); err != nil {
		return err
	}
	if _, err := tx.Exec("UPDATE group_members SET "+
		"unread_count = unread_count + (SELECT COUNT(*) FROM messages WHERE id BETWEEN ?1 AND ?2 AND sender_context_id != group_members.context_id), "+
		"latest_message_id = COALESCE((SELECT MAX(id) FROM messages WHERE id BETWEEN ?1 AND ?2 AND sender_context_id = group_members.context_id), latest_message_id)",
		first, last); err != nil {
		return err
	}
	var wakeArgs []any
	metrics := map[[2]string]int{}
	var metricOrder [][2]string
	var memberRevs, wakeupRevs int // every message bumps the message revision
	for k, p := range pending {
		for _, t := range p.route.targets {
			wakeArgs = append(wakeArgs, first+int64(k), t.contextID, t.relevance, p.msg.priority, p.now)
		}
		for _, m := range [][2]string{{"priority", p.msg.priority}, {"routing", p.route.reason}} {
			if metrics[m] == 0 {
				metricOrder = append(metricOrder, m)
			}
			metrics[m]++
		}
		if len(p.others) > 0 {
			memberRevs++
		}
		if len(p.route.targets) > 0 {
			wakeupRevs++
		}
	}
	if _, err := tx.insertRows("INSERT OR IGNORE INTO wakeup_events(message_id, context_id, relevance, priority, created_at) VALUES ", 5, wakeArgs); err != nil {
		return err
	}
	for _, m := range metricOrder {
		if _, err := tx.Exec("INSERT INTO group_message_metrics(metric, value, count) VALUES (?1, ?2, ?3) "+
			"ON CONFLICT(metric, value) DO UPDATE SET count = count + ?3", m[0], m[1], metrics[m]); err != nil {
			return err
		}
	}
	_, err := tx.Exec("UPDATE group_state SET message_revision = message_revision + ?, member_revision = member_revision + ?, "+
		"wakeup_revision = wakeup_revision + ? WHERE id = 1", len(pending), memberRevs, wakeupRevs)
	return err
}

// tokensTable records the name (never the token) of the per-agent HTTP
// token each message was sent through, for the dashboard. The first such
// send creates it, so a directory used without per-agent tokens keeps
// exactly the original's schema.
const tokensTable = `CREATE TABLE IF NOT EXISTS message_tokens (
    message_id INTEGER PRIMARY KEY,
    token_name TEXT NOT NULL
)`

// recordTokenNames records, in the send's transaction, the token name of
// each message of pending (whose ids are first, first+1, …) that has one.
func recordTokenNames(tx groupTx, pending []routedSend, first int64) error {
	var args []any
	for k, p := range pending {
		if p.msg.token != "" {
			args = append(args, first+int64(k), p.msg.token)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if _, err := tx.Exec(tokensTable); err != nil {
		return err
	}
	_, err := tx.insertRows("INSERT OR REPLACE INTO message_tokens(message_id, token_name) VALUES ", 2, args)
	return err
}

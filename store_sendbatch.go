package main

import (
	"strings"
	"sync"
)

// sendBatch is one or more sends to a group written in one transaction. Its
// point is the search index: the FTS5 triggers on messages write the index's
// pending data at every statement boundary, so inserting a run's messages
// one statement each wrote one index segment per message, plus merge work
// (about half of a pipelined send's CPU). A batch inserts all of its
// messages with one multi-row INSERT, so the index is written once per
// transaction, and then does each message's other writes in order, exactly
// as a lone send does them. The rows stored are those of one-by-one sends;
// the schema and triggers are untouched, so the original writing the same
// directory sees nothing new.
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

// maxBatchInsert and maxWakeInsert bound the rows of one INSERT of messages
// (eight parameters each) and of wake events (five each): SQLite allows
// 32,766 bound parameters. A pipelined run is at most maxSendRun anyway.
const (
	maxBatchInsert = 256
	maxWakeInsert  = 2048
)

// valuesSQL returns prefix followed by n tuples of width parameters, built
// once per text; the write connection prepares each text once too.
var valuesSQL = func() func(prefix string, width, n int) string {
	type key struct {
		prefix   string
		width, n int
	}
	var mu sync.Mutex
	cache := map[key]string{}
	return func(prefix string, width, n int) string {
		mu.Lock()
		defer mu.Unlock()
		k := key{prefix, width, n}
		if q, ok := cache[k]; ok {
			return q
		}
		tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", width), ", ") + "), "
		q := prefix + strings.TrimSuffix(strings.Repeat(tuple, n), ", ")
		cache[k] = q
		return q
	}
}()

// sendMessage stores a message from contextID, fans it out as unread to
// every other member and records one wake event per routed recipient, all in
// one transaction, which other processes' sends may share (combineSend).
func (s *store) sendMessage(id string, m outgoing) (sent, error) {
	outs, errs, err := s.sendMessages(id, []outgoing{m})
	if err != nil {
		return sent{}, err
	}
	return outs[0], errs[0]
}

// sendMessages stores several messages to group id in one transaction, in
// order: a group commit for sends a client pipelines. Each message is
// written as sendMessage would write it. A message refused for its sender
// (errs[i], a *domainError) writes nothing and leaves the others to commit;
// any other failure rolls all of them back and is returned as err.
func (s *store) sendMessages(id string, msgs []outgoing) (outs []sent, errs []error, err error) {
	if c := s.combining(id, msgs); c != nil {
		return c.send()
	}
	return s.sendPlain(id, msgs)
}

// sendPlain is sendMessages in a transaction of this call's own.
func (s *store) sendPlain(id string, msgs []outgoing) (outs []sent, errs []error, err error) {
	err = s.writeGroup(id, func(tx groupTx) error {
		outs, errs, err = s.newSendBatch(tx, id).write(msgs)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return outs, errs, nil
}

func (s *store) newSendBatch(tx groupTx, id string) sendBatch {
	return sendBatch{tx: tx, id: id, now: s.timestamp}
}

// write stores msgs in order and returns each one's result or refusal. A
// refusal (not joined, wrong name) is decided before anything is written,
// from one read of the members: sends never change who is a member, so that
// read holds for the whole batch. The routing is decided before the INSERT;
// the original inserts and then updates the row, which ends in the same row.
func (b sendBatch) write(msgs []outgoing) (outs []sent, errs []error, err error) {
	members, err := groupMembers(b.tx)
	if err != nil {
		return nil, nil, err
	}
	outs, errs = make([]sent, len(msgs)), make([]error, len(msgs))
	var pending []routedSend
	var index []int // index[k] is the position in msgs of pending[k]
	for i, m := range msgs {
		if m.huge != nil && m.huge.taken {
			// A retry of a batch whose first attempt took the text (see
			// hugeText): nothing of it is left to store.
			return nil, nil, errHugeTextTaken
		}
		others, err := othersOf(members, m.contextID, m.name)
		if err != nil {
			errs[i] = err
			continue
		}
		r := route(others, m.body(), m.priority, m.wake)
		ids := make([]string, len(r.targets))
		for j, t := range r.targets {
			ids[j] = t.contextID
		}
		now := m.at
		if now == "" {
			now = b.now()
		}
		pending = append(pending, routedSend{msg: m, others: others, route: r, ids: ids, now: now})
		index = append(index, i)
	}
	for start := 0; start < len(pending); start += maxBatchInsert {
		chunk := pending[start:min(start+maxBatchInsert, len(pending))]
		first, err := b.insertMessages(chunk)
		if err != nil {
			return nil, nil, err
		}
		if err := b.fanOut(chunk, first); err != nil {
			return nil, nil, err
		}
		for k, p := range chunk {
			outs[index[start+k]] = sent{groupID: b.id, priority: p.msg.priority, messageID: first + int64(k), mentions: p.route.mentions,
				routingReason: p.route.reason, wakeupTargets: p.ids}
		}
	}
	return outs, errs, nil
}

// insertMessages inserts the messages of chunk and returns the id of the
// first; a lone message of hugeLine bytes or more is indexed for search
// aside (insertHuge).
func (b sendBatch) insertMessages(chunk []routedSend) (int64, error) {
	if len(chunk) == 1 && len(chunk[0].msg.body()) >= hugeLine {
		if id, ok, err := b.insertHuge(chunk[0]); ok || err != nil {
			return id, err
		}
	}
	return b.insertRows(chunk)
}

// insertMessagesSQL starts the INSERT of messages rows, eight values each
// in this order; insertRows and insertReleasing both write with it.
const insertMessagesSQL = "INSERT INTO messages(sender_context_id, sender_name, content, created_at, priority, mentions, " +
	"wakeup_targets, routing_reason) VALUES "

// insertRows inserts the messages of chunk with one statement and returns
// the id of the first. The ids are consecutive: the transaction holds the
// write lock and messages.id is AUTOINCREMENT, so each row takes the id
// after the one before it.
func (b sendBatch) insertRows(chunk []routedSend) (int64, error) {
	args := make([]any, 0, 8*len(chunk))
	for _, p := range chunk {
		args = append(args, p.msg.contextID, p.msg.name, p.msg.body(), p.now, p.msg.priority,
			pyJSON(stringList(p.route.mentions)), pyJSON(stringList(p.ids)), p.route.reason)
	}
	res, err := b.tx.Exec(valuesSQL(insertMessagesSQL, 8, len(chunk)), args...)
	if err != nil {
		return 0, err
	}
	last, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	return last - int64(len(chunk)) + 1, nil
}

// fanOut makes the rest of the chunk's writes, whose messages have the ids
// first, first+1, …: unread rows, member counters, wake events, metrics and
// revisions. It writes with one statement each what a lone send writes per
// message, and the rows come out the same: the unread rows and wake events
// are inserted in the order one-by-one sends insert them (so they get the
// same rowids), and counters add up the same increments.
func (b sendBatch) fanOut(chunk []routedSend, first int64) error {
	tx, last := b.tx, first+int64(len(chunk))-1
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
	var revs [4]int // message, member, wakeup, metadata increments
	for k, p := range chunk {
		for _, t := range p.route.targets {
			wakeArgs = append(wakeArgs, first+int64(k), t.contextID, t.relevance, p.msg.priority, p.now)
		}
		for _, m := range [][2]string{{"priority", p.msg.priority}, {"routing", p.route.reason}} {
			if metrics[m] == 0 {
				metricOrder = append(metricOrder, m)
			}
			metrics[m]++
		}
		revs[0]++
		if len(p.others) > 0 {
			revs[1]++
		}
		if len(p.route.targets) > 0 {
			revs[2]++
		}
	}
	for len(wakeArgs) > 0 {
		n := min(len(wakeArgs), maxWakeInsert*5)
		if _, err := tx.Exec(valuesSQL("INSERT OR IGNORE INTO wakeup_events(message_id, context_id, relevance, priority, created_at) VALUES ", 5, n/5), wakeArgs[:n]...); err != nil {
			return err
		}
		wakeArgs = wakeArgs[n:]
	}
	for _, m := range metricOrder {
		if _, err := tx.Exec("INSERT INTO group_message_metrics(metric, value, count) VALUES (?1, ?2, ?3) "+
			"ON CONFLICT(metric, value) DO UPDATE SET count = count + ?3", m[0], m[1], metrics[m]); err != nil {
			return err
		}
	}
	_, err := tx.Exec("UPDATE group_state SET message_revision = message_revision + ?, member_revision = member_revision + ?, "+
		"wakeup_revision = wakeup_revision + ? WHERE id = 1", revs[0], revs[1], revs[2])
	return err
}

// groupMembers reads every member in the table's natural order, which the
// original's routing order follows.
func groupMembers(tx groupTx) ([]recipient, error) {
	rows, err := tx.Query("SELECT context_id, name FROM group_members")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var all []recipient
	for rows.Next() {
		var r recipient
		if err := rows.Scan(&r.contextID, &r.name); err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	return all, rows.Err()
}

// othersOf checks that contextID has joined as name and returns the other
// members, in order.
func othersOf(all []recipient, contextID, name string) ([]recipient, error) {
	others := make([]recipient, 0, len(all))
	joined, found := "", false
	for _, r := range all {
		if r.contextID == contextID {
			joined, found = r.name, true
		} else {
			others = append(others, r)
		}
	}
	if !found {
		return nil, errNotJoined
	}
	if joined != name {
		return nil, errNameMismatch
	}
	return others, nil
}

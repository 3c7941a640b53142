package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"time"
	"unicode/utf8"
)

// combineSend is one call's sends to a group on their way to a commit that
// other processes' sends may share: a group commit across processes.
//
// Every process sends in its own transaction otherwise, and most of a
// transaction's cost does not grow with its messages: with eight members a
// send dirties some forty pages (each member's leaf of two indexes among
// them) and pays one fsync, and eight senders' messages written together
// take 3.5 ms where one takes 1.4 ms (a 2-core VM). Eight agents sending
// one at a time waited for eight commits in turn, each slower for the
// contention (its page cache invalidated by the others). Combined, a commit
// carries the sends of every process that was waiting, and a send waits for
// about two commits.
//
// The rendezvous is a Unix socket named after the group file (see
// combineName), in Linux's abstract namespace, so there is no file to leave
// behind and the kernel frees the name when its process dies. The process
// holding the name is the group's next leader: it binds the name, takes the
// write lock as any writer does (the write queue, then BEGIN IMMEDIATE),
// and then accepts every connection waiting, reads each follower's request,
// writes its own sends and theirs with one sendBatch, closes the name and
// commits. After the commit it sends each follower its results. A sender
// that finds the name bound connects and follows; one that finds it free
// binds it and leads. Writers that do not combine (the original, other
// tools, other kinds of write) are unaffected: they take SQLite's lock as
// before, and a leader is an ordinary writer.
//
// Each send is stored exactly once, whichever process dies or stalls:
//   - A leader stores a request only if, holding the write lock, it finds
//     the follower's connection still open (stillOpen), and then stores it
//     in that same transaction. A request it will not store it refuses
//     explicitly, and the follower sends again.
//   - Any other ending than results or a refusal (end-of-file, no answer in
//     time, a garbled line) leaves the outcome unknown. The follower closes
//     the connection, so that no leader can take the request from then on,
//     and writes with sendGuarded. A leader that found the connection open
//     did so before that close, holding the write lock, so the follower's
//     transaction begins only after the leader's has ended; it first looks
//     for each message by sender, name, timestamp and text. The follower
//     stamps its messages itself, to the microsecond, so that both sides
//     know the timestamp.
//
// In the one case that stays uncertain, a leader stalled for longer than
// the follower waits (combineReplyWait and then busyRetryWindow), the
// follower reports the group busy, and the stalled leader may still commit.
type combineSend struct {
	s    *store
	id   string
	name string     // the rendezvous, combineName of the group file
	msgs []outgoing // stamped: at is set
}

// combineRequest is a follower's request, one JSON line.
type combineRequest struct {
	GroupID  string           `json:"group_id"`
	Messages []combineMessage `json:"messages"`
}

// combineMessage is one outgoing on the wire, with its timestamp.
type combineMessage struct {
	ContextID string   `json:"context_id"`
	Name      string   `json:"name"`
	Text      string   `json:"text"`
	Priority  string   `json:"priority"`
	Wake      []string `json:"wake"`
	At        string   `json:"at"`
}

// combineReply is a leader's answer line: after the commit, the results
// (one per message, in order); or at once {"refused": true} for a request
// it did not store.
type combineReply struct {
	Refused bool            `json:"refused,omitempty"`
	Results []combineResult `json:"results,omitempty"`
}

// combineResult is one message's sent, or its refusal (Error non-empty).
type combineResult struct {
	MessageID     int64    `json:"message_id"`
	Priority      string   `json:"priority"`
	Mentions      []string `json:"mentions"`
	RoutingReason string   `json:"routing_reason"`
	WakeupTargets []string `json:"wakeup_targets"`
	Category      string   `json:"category,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// Bounds of a combined commit. A request is small by construction (larger
// sends go the plain way) and written right after connecting, so a leader,
// which holds the write lock meanwhile, waits at most combineRequestWait to
// read one (and to write an answer): a follower that was slower is refused
// and sends again. combineReplyWait bounds a follower's wait for its
// results; the leader needs one transaction, so a longer wait means it
// stalled, and the follower then writes for itself.
const (
	combineMaxBytes     = 256 << 10
	combineMaxFollowers = 32
	combineMaxMessages  = 256
	combineRequestWait  = 5 * time.Millisecond
	combineReplyWait    = 10 * time.Second
)

// A leader that finds nobody waiting, in a process that combined within the
// last combineBusySpell, looks again for up to combineLinger before it
// writes. In a busy group the senders answered by one commit come back
// together, within a millisecond or two, and the first of them would
// otherwise commit alone while the rest wait for it (a fifth of the
// commits, with eight senders). A sender in a quiet group never combines
// and never lingers, nor does one in a group whose senders take turns.
const (
	combineBusySpell = 5 * time.Millisecond
	combineLinger    = 400 * time.Microsecond
)

// followOutcome is what a follower learned from its leader.
type followOutcome int

const (
	followDone    followOutcome = iota // results received: stored as they say
	followRefused                      // not stored, and it never will be
	followUnknown                      // look before writing
)

// combining returns msgs to group id stamped for a combined commit, or nil
// when they go the plain way: no rendezvous on this platform, a huge or
// large request, or a group file that cannot be looked at.
func (s *store) combining(id string, msgs []outgoing) *combineSend {
	if !combineAvailable || validateGroupID(id) != nil {
		return nil
	}
	size := 0
	for _, m := range msgs {
		if m.huge != nil {
			return nil
		}
		size += len(m.text)
	}
	if size > combineMaxBytes {
		return nil
	}
	info, err := os.Stat(s.groupPath(id))
	if err != nil {
		return nil
	}
	name := combineName(id, info)
	if name == "" {
		return nil
	}
	stamped := make([]outgoing, len(msgs))
	for i, m := range msgs {
		m.at = s.timestamp()
		stamped[i] = m
	}
	return &combineSend{s: s, id: id, name: name, msgs: stamped}
}

// send stores c's messages, leading or following a leader. Binding comes
// first: in a group with one sender at a time it succeeds, and that sender
// pays no failed connect. A few tries cover the moments when a leader has
// just given the name up; past them the messages go the plain way.
func (c *combineSend) send() ([]sent, []error, error) {
	for range 3 {
		if ln := listenCombiner(c.name); ln != nil {
			return c.lead(ln)
		}
		if conn := dialCombiner(c.name); conn != nil {
			outs, errs, how := c.follow(conn)
			switch how {
			case followDone:
				c.s.lastCombined.Store(time.Now().UnixNano())
				return outs, errs, nil
			case followUnknown:
				return c.s.sendGuarded(c.id, c.msgs)
			}
			// Refused: lead, or follow the next leader.
		}
	}
	return c.s.sendPlain(c.id, c.msgs)
}

// follow hands c's messages to the leader on conn and closes conn before
// returning, so that the caller may write for itself after followUnknown.
func (c *combineSend) follow(conn net.Conn) ([]sent, []error, followOutcome) {
	defer conn.Close()
	req := combineRequest{GroupID: c.id, Messages: make([]combineMessage, len(c.msgs))}
	for i, m := range c.msgs {
		req.Messages[i] = combineMessage{ContextID: m.contextID, Name: m.name, Text: m.text, Priority: m.priority, Wake: m.wake, At: m.at}
	}
	conn.SetDeadline(time.Now().Add(combineReplyWait))
	// A failed write is judged by what the read finds: the leader has
	// either the whole line or none of it.
	json.NewEncoder(conn).Encode(req)
	var reply combineReply
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &reply) != nil {
		return nil, nil, followUnknown
	}
	if reply.Refused {
		return nil, nil, followRefused
	}
	if len(reply.Results) != len(c.msgs) {
		return nil, nil, followUnknown
	}
	outs, errs := make([]sent, len(c.msgs)), make([]error, len(c.msgs))
	for i, res := range reply.Results {
		if res.Error != "" {
			errs[i] = &domainError{category: res.Category, msg: res.Error}
			continue
		}
		outs[i] = sent{messageID: res.MessageID, groupID: c.id, priority: res.Priority, mentions: res.Mentions,
			routingReason: res.RoutingReason, wakeupTargets: res.WakeupTargets}
	}
	return outs, errs, followDone
}

// lead stores c's messages and those of the followers waiting on ln in one
// transaction, and answers the followers once it has ended.
func (c *combineSend) lead(ln *combineListener) (outs []sent, errs []error, err error) {
	defer ln.close()
	var served []*combineFollower
	err = c.s.writeGroup(c.id, func(tx groupTx) error {
		// writeGroup runs this again only after the first transaction
		// failed, which stored nothing of the followers taken then.
		for _, f := range served {
			f.conn.Close()
		}
		served = nil
		b, own, room := c.s.newSendBatch(tx, c.id), len(c.msgs), combineMaxMessages-len(c.msgs)
		more := takeWaiting(ln, c.id, combineMaxFollowers, &room)
		if len(more) == 0 && time.Since(time.Unix(0, c.s.lastCombined.Load())) < combineBusySpell {
			for until := time.Now().Add(combineLinger); len(more) == 0 && time.Now().Before(until); {
				time.Sleep(combineLinger / 8)
				more = takeWaiting(ln, c.id, combineMaxFollowers, &room)
			}
		}
		batch := append(slices.Clone(c.msgs), followerMsgs(more)...)
		for first := true; len(batch) > 0; first = false {
			o, e, err := b.write(batch)
			if err != nil {
				return err
			}
			if first {
				outs, errs, o, e = o[:own], e[:own], o[own:], e[own:]
			}
			for _, f := range more {
				f.outs, f.errs, o, e = o[:len(f.msgs)], e[:len(f.msgs)], o[len(f.msgs):], e[len(f.msgs):]
			}
			served = append(served, more...)
			// Followers that came during that write join with one more
			// statement. The name is given up before the commit, whose
			// fsync is the longest wait, so that whoever comes then leads
			// the next commit and gathers its own followers meanwhile.
			more = takeWaiting(ln, c.id, combineMaxFollowers-len(served), &room)
			batch = followerMsgs(more)
		}
		ln.close()
		return nil
	})
	// A leader that failed before taking them (the group busy or gone)
	// refuses the followers still waiting, so that they send again at once
	// instead of looking for their messages first.
	for conn := ln.accept(); conn != nil; conn = ln.accept() {
		refuse(conn)
	}
	for _, f := range served {
		if err == nil {
			c.s.combined.Add(int64(len(f.msgs)))
			c.s.lastCombined.Store(time.Now().UnixNano())
			f.answer()
		}
		// Without an answer the follower looks for its messages itself.
		f.conn.Close()
	}
	return outs, errs, err
}

// followerMsgs lists the messages of fs in order.
func followerMsgs(fs []*combineFollower) []outgoing {
	var all []outgoing
	for _, f := range fs {
		all = append(all, f.msgs...)
	}
	return all
}

// combineFollower is a request a leader took.
type combineFollower struct {
	conn net.Conn
	msgs []outgoing
	outs []sent
	errs []error
}

// takeWaiting accepts up to n followers waiting on ln, with room messages
// between them at most. The caller holds the write lock: that is what makes
// stillOpen a promise (see combineSend).
func takeWaiting(ln *combineListener, id string, n int, room *int) []*combineFollower {
	var taken []*combineFollower
	for len(taken) < n && *room > 0 {
		conn := ln.accept()
		if conn == nil {
			break
		}
		f := readFollower(conn, id)
		switch {
		case f == nil || len(f.msgs) > *room:
			refuse(conn)
		case stillOpen(conn):
			taken = append(taken, f)
			*room -= len(f.msgs)
		default:
			conn.Close() // the follower gave up and writes for itself
		}
	}
	return taken
}

// refuse tells a follower that its request was not stored, and closes it.
func refuse(conn net.Conn) {
	conn.SetWriteDeadline(time.Now().Add(combineRequestWait))
	conn.Write([]byte("{\"refused\": true}\n"))
	conn.Close()
}

// readFollower reads and checks the request on conn, or returns nil. A
// request is checked as the tool checked it: the leader stores it as its
// own sends, and a malformed one must not get that far.
func readFollower(conn net.Conn, id string) *combineFollower {
	conn.SetReadDeadline(time.Now().Add(combineRequestWait))
	// The bound keeps a request from growing without end in the leader's
	// memory; JSON may escape a byte as six.
	line, err := bufio.NewReaderSize(io.LimitReader(conn, 6*combineMaxBytes+64<<10), 64<<10).ReadBytes('\n')
	var req combineRequest
	// Invalid UTF-8 is refused, not replaced: a leader stores exactly what
	// the follower's tool accepted, and the tool refuses it.
	if err != nil || !utf8.Valid(line) || json.Unmarshal(line, &req) != nil || req.GroupID != id || len(req.Messages) == 0 {
		return nil
	}
	f := &combineFollower{conn: conn, msgs: make([]outgoing, len(req.Messages))}
	for i, m := range req.Messages {
		if !validCombined(m) {
			return nil
		}
		f.msgs[i] = outgoing{contextID: m.ContextID, name: m.Name, text: m.Text, priority: m.Priority, wake: m.Wake, at: m.At}
	}
	return f
}

// validCombined reports whether m is a send the tool could have made.
func validCombined(m combineMessage) bool {
	if m.ContextID == "" || m.Name == "" || m.Text == "" {
		return false
	}
	if _, err := time.Parse("2006-01-02T15:04:05.999999+00:00", m.At); err != nil {
		return false
	}
	switch m.Priority {
	case "low", "normal", "high", "urgent":
		return true
	}
	return false
}

// answer sends f its results.
func (f *combineFollower) answer() {
	res := make([]combineResult, len(f.msgs))
	for i := range f.msgs {
		var de *domainError
		switch {
		case f.errs[i] == nil:
			o := f.outs[i]
			res[i] = combineResult{MessageID: o.messageID, Priority: o.priority, Mentions: o.mentions,
				RoutingReason: o.routingReason, WakeupTargets: o.wakeupTargets}
		case errors.As(f.errs[i], &de):
			res[i] = combineResult{Category: de.category, Error: de.msg}
		default:
			res[i] = combineResult{Category: categoryInternal, Error: f.errs[i].Error()}
		}
	}
	line, err := json.Marshal(combineReply{Results: res})
	if err != nil {
		return
	}
	f.conn.SetWriteDeadline(time.Now().Add(combineRequestWait))
	f.conn.Write(append(line, '\n'))
}

// sendGuarded stores msgs, stamped, after a hand-off whose outcome is
// unknown. A leader stores a request whole or not at all, in order, so each
// message it stored is found by its sender, name, timestamp and text (the
// n-th of several equal ones in msgs as the n-th such row), and answered
// from its row; only the others are written. The lookup walks the sender's
// messages, which is fine for a path taken only when a leader died or
// stalled. It retries a busy group itself: the stalled leader may still be
// holding the write lock.
func (s *store) sendGuarded(id string, msgs []outgoing) (outs []sent, errs []error, err error) {
	err = retryBusy(func() error {
		return s.writeGroup(id, func(tx groupTx) error {
			outs, errs = make([]sent, len(msgs)), make([]error, len(msgs))
			var rest []outgoing
			var at []int
			for i, m := range msgs {
				found, ok, err := storedSend(tx, id, m, countEqual(msgs[:i], m))
				if err != nil {
					return err
				}
				if ok {
					outs[i] = found
					continue
				}
				rest, at = append(rest, m), append(at, i)
			}
			if len(rest) == 0 {
				return nil
			}
			o, e, err := s.newSendBatch(tx, id).write(rest)
			if err != nil {
				return err
			}
			for k, i := range at {
				outs[i], errs[i] = o[k], e[k]
			}
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return outs, errs, nil
}

// countEqual counts the messages of msgs that storedSend cannot tell from m.
func countEqual(msgs []outgoing, m outgoing) int {
	n := 0
	for _, o := range msgs {
		if o.contextID == m.contextID && o.name == m.name && o.at == m.at && o.text == m.text {
			n++
		}
	}
	return n
}

// storedSend looks for m, stamped, among the stored messages, skipping the
// first skip that match it.
func storedSend(tx groupTx, id string, m outgoing, skip int) (sent, bool, error) {
	var out sent
	var mentions, targets string
	err := tx.QueryRow("SELECT id, priority, COALESCE(mentions, '[]'), COALESCE(wakeup_targets, '[]'), COALESCE(routing_reason, '') "+
		"FROM messages WHERE sender_context_id = ? AND sender_name = ? AND created_at = ? AND content = ? ORDER BY id LIMIT 1 OFFSET ?",
		m.contextID, m.name, m.at, m.text, skip).
		Scan(&out.messageID, &out.priority, &mentions, &targets, &out.routingReason)
	if errors.Is(err, sql.ErrNoRows) {
		return sent{}, false, nil
	}
	if err != nil {
		return sent{}, false, err
	}
	out.groupID = id
	json.Unmarshal([]byte(mentions), &out.mentions)
	json.Unmarshal([]byte(targets), &out.wakeupTargets)
	return out, true, nil
}

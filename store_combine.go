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
// holding the name is the group's leader. A round of it takes the write
// lock as any writer does (the write queue, then BEGIN IMMEDIATE), accepts
// every connection waiting, reads each follower's request, writes its own
// sends, if any, and theirs with one sendBatch, and commits; after the
// commit it sends each follower its results. A sender that finds the name
// bound connects and follows; one that finds it free binds it and leads.
// A leader that served followers keeps the name and goes on leading in the
// background (keepLeading), a round for whoever came during the last one,
// until nobody has come for combineHold: the group's writes then stay on
// one connection, whose page cache no other process's commit invalidates,
// and no sender pays for binding, taking the lock and giving it back in
// between. Writers that do not combine (the original, other tools, other
// kinds of write) are unaffected: they take SQLite's lock as before, and a
// leader's round is an ordinary write transaction.
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
// results. The leader needs a round or two, each bounded by the write
// queue's and SQLite's waits (a few hundred milliseconds at worst), so a
// longer wait means it stalled, and the follower then writes for itself.
// It also sends the plain way for combineStallMemo: a leader whose process
// was stopped (an agent suspended with Ctrl-Z) keeps its name bound, and
// the kernel still queues connections to it, so every send of the group
// would wait as long again.
const (
	combineMaxBytes     = 256 << 10
	combineMaxFollowers = 32
	combineMaxMessages  = 256
	combineRequestWait  = 5 * time.Millisecond
	combineReplyWait    = 2 * time.Second
	combineStallMemo    = 30 * time.Second
)

// combineHold is how long a leader that served followers waits for the
// next one before it gives the name up. Senders answered by one round come
// back within a millisecond or two when their agents send without pause (a
// busy group's senders, with eight of them on a 2-core VM), so they find
// the leader still there; an agent that sends every few seconds finds it
// gone, binds the name and leads itself, as in a quiet group. Holding costs
// the leader's process one thread blocked in ppoll, and nothing else.
const combineHold = 5 * time.Millisecond

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
	if name == "" || s.stalledRecently(name) {
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
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.s.rememberStall(c.name)
	}
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
// round. A leader that served followers, or finds more waiting, keeps
// leading in the background; otherwise it gives the name up at once.
func (c *combineSend) lead(ln *combineListener) ([]sent, []error, error) {
	outs, errs, served, err := c.s.combineRound(ln, c.id, c.msgs)
	if err == nil && (served > 0 || ln.waiting(0)) && c.s.keepLeading(ln, c.id) {
		return outs, errs, nil
	}
	ln.release()
	return outs, errs, err
}

// keepLeading serves the followers that come to ln, in rounds, from a
// goroutine of its own, until nobody has come for combineHold, a round
// fails (the group busy or gone: the followers waiting are refused, and
// lead for themselves), or the store closes. It reports false, and leaves
// ln to the caller, when the store is already closing.
func (s *store) keepLeading(ln *combineListener, id string) bool {
	s.leadersMu.Lock()
	defer s.leadersMu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.leaders.Add(1)
	go func() {
		defer s.leaders.Done()
		defer ln.release()
		for !s.closing.Load() && ln.waiting(combineHold) {
			if _, _, _, err := s.combineRound(ln, id, nil); err != nil {
				return
			}
		}
	}()
	return true
}

// combineRound writes own, a sender's stamped messages or none, and the
// requests of the followers waiting on ln in one transaction, and answers
// those followers after it has ended. It returns own's results and how
// many followers it served. After a failed round its caller releases ln,
// which refuses the followers still waiting, so that they send again at
// once instead of looking for their messages first; those the round had
// taken find no answer and do look.
func (s *store) combineRound(ln *combineListener, id string, own []outgoing) (outs []sent, errs []error, served int, err error) {
	var taken []*combineFollower
	err = s.withHandle(id, func(h *groupHandle) error {
		return h.write(func(tx groupTx) error {
			// withHandle runs this again only after the first transaction
			// failed, which stored nothing of the followers taken then.
			for _, f := range taken {
				f.conn.close()
			}
			room := combineMaxMessages - len(own)
			taken = takeWaiting(ln, id, combineMaxFollowers, &room)
			o, e, err := s.newSendBatch(tx, id).write(append(slices.Clone(own), followerMsgs(taken)...))
			if err != nil {
				return err
			}
			outs, errs, o, e = o[:len(own)], e[:len(own)], o[len(own):], e[len(own):]
			for _, f := range taken {
				f.outs, f.errs, o, e = o[:len(f.msgs)], e[:len(f.msgs)], o[len(f.msgs):], e[len(f.msgs):]
			}
			return nil
		})
	})
	for _, f := range taken {
		if err == nil {
			s.combined.Add(int64(len(f.msgs)))
			f.answer()
		}
		f.conn.close()
	}
	if err != nil {
		return nil, nil, 0, err
	}
	return outs, errs, len(taken), nil
}

// rememberStall notes that the leader holding name left a follower of
// this process unanswered for combineReplyWait.
func (s *store) rememberStall(name string) {
	s.stalledMu.Lock()
	defer s.stalledMu.Unlock()
	if s.stalled == nil {
		s.stalled = map[string]time.Time{}
	}
	for n, until := range s.stalled {
		if time.Now().After(until) {
			delete(s.stalled, n)
		}
	}
	s.stalled[name] = time.Now().Add(combineStallMemo)
}

// stalledRecently reports whether the leader holding name stalled within the
// last combineStallMemo.
func (s *store) stalledRecently(name string) bool {
	s.stalledMu.Lock()
	defer s.stalledMu.Unlock()
	return time.Now().Before(s.stalled[name])
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
	conn *followerConn
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
		case conn.stillOpen():
			taken = append(taken, f)
			*room -= len(f.msgs)
		default:
			conn.close() // the follower gave up and writes for itself
		}
	}
	return taken
}

// refuse tells a follower that its request was not stored, and closes it.
func refuse(conn *followerConn) {
	conn.deadline = time.Now().Add(combineRequestWait)
	conn.Write([]byte("{\"refused\": true}\n"))
	conn.close()
}

// readFollower reads and checks the request on conn, or returns nil. A
// request is checked as the tool checked it: the leader stores it as its
// own sends, and a malformed one must not get that far.
func readFollower(conn *followerConn, id string) *combineFollower {
	conn.deadline = time.Now().Add(combineRequestWait)
	// The bound keeps a request from growing without end in the leader's
	// memory; JSON may escape a byte as six.
	line, err := bufio.NewReader(io.LimitReader(conn, 6*combineMaxBytes+64<<10)).ReadBytes('\n')
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
	f.conn.deadline = time.Now().Add(combineRequestWait)
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

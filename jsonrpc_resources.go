package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
)

// resourcesList lists every group's change-signal resource.
func (s *server) resourcesList(rev protocolRevision) (any, *rpcError) {
	var groups []groupMeta
	if err := retryBusy(func() (err error) { groups, err = s.store.listGroups(); return err }); err != nil {
		logf("resources/list: %v", err)
		return nil, errInternal
	}
	return object{{"resources", mapSlice(groups, func(g groupMeta) any {
		r := object{{"uri", groupURI(g.groupID)}, {"name", "Crosstalk " + g.groupID}}
		if rev >= revTyped {
			r = append(r, field{"title", "Group " + g.groupID})
		}
		return append(r, field{"description", "Group-change signal. A change may not be relevant to this AI; call get_unread_messages to check."},
			field{"mimeType", "application/json"})
	})}}, nil
}

// withResourceURI runs handle with the uri param of a resources/* request, or refuses it.
func withResourceURI(req request, handle func(request, string) (any, *rpcError)) (any, *rpcError) {
	p, err := req.paramsObject()
	if err != nil {
		return nil, err
	}
	uri, ok := p.str("uri")
	if !ok && p.has("uri") {
		return nil, errInvalidParams("Invalid Crosstalk subscription URI.")
	}
	return handle(req, uri)
}

// resourceError maps a domain or storage error of a resources/* request for
// rev: a missing resource is errResourceNotFound where rev defines it.
func resourceError(rev protocolRevision, err error) *rpcError {
	if de, ok := errors.AsType[*domainError](err); ok {
		if rev >= revTyped && rev < revModern && de.category == categoryNotFound {
			return &rpcError{errResourceNotFound, de.msg} // no "Invalid params: " prefix
		}
		return errInvalidParams(de.msg)
	}
	logf("resource request: %v", err)
	return errInternal
}

// resourcesRead returns a snapshot of a group, or of a member's wake events or receipts, as JSON text.
func (s *server) resourcesRead(req request, uri string) (any, *rpcError) {
	var snapshot object
	err := retryBusy(func() error {
		// A receipts URI is authorized as the wakeup URI of the same member.
		if wuri, receipts := receiptsWakeupURI(uri); receipts || isWakeupURI(uri) {
			g, c, err := s.wakeupAccess(req.version, cmp.Or(wuri, uri))
			if err != nil {
				return err
			}
			if receipts {
				snapshot, err = s.receiptsSnapshot(g, c)
				return err
			}
			events, err := s.store.wakeups(g, c, 0)
			snapshot = object{{"group_id", g}, {"context_id", c}, {"wakeups", mapSlice(events, func(w delivery) any {
				return object{{"event_id", w.id}, {"message_id", w.messageID}, {"relevance", w.relevance}, {"priority", w.priority},
					{"created_at", w.createdAt}, {"acknowledged_at", w.acknowledgedAt}, {"last_notified_at", w.notifiedAt}}
			})}}
			return err
		}
		g, err := parseGroupURI(uri)
		if err != nil {
			return err
		}
		count, latest, err := s.store.groupSnapshot(g)
		snapshot = object{{"group_id", g}, {"message_count", count}, {"latest_message_id", latest}}
		return err
	})
	if err != nil {
		return nil, resourceError(req.version, err)
	}
	return object{{"contents", []any{object{{"uri", uri}, {"mimeType", "application/json"}, {"text", pyJSON(snapshot)}}}}}, nil
}

// receiptsSnapshot renders each recipient's state of contextID's newest messages in g.
func (s *server) receiptsSnapshot(g, contextID string) (object, error) {
	ids, byMessage, err := s.store.sentReceipts(g, contextID, receiptLimit)
	messages := mapSlice(ids, func(id int64) any {
		return object{{"message_id", id}, {"recipients", mapSlice(byMessage[id], func(r receipt) any {
			var via any // JSON null for ""
			if r.deliveredVia != "" {
				via = r.deliveredVia
			}
			return object{{"context_id", r.contextID}, {"name", r.name}, {"state", r.state()},
				{"notified_at", r.notifiedAt}, {"delivered_at", r.deliveredAt}, {"delivered_via", via}, {"read_at", r.readAt}}
		})}}
	})
	return object{{"group_id", g}, {"context_id", contextID}, {"messages", messages}}, err
}

// resourcesSubscribe starts watching a resource for this session.
func (s *server) resourcesSubscribe(req request, uri string) (any, *rpcError) {
	if err := retryBusy(func() error { return s.subs.subscribe(uri) }); err != nil {
		return nil, resourceError(req.version, err)
	}
	return object{}, nil
}

// resourcesUnsubscribe stops a subscription. Unsubscribing a joined
// context's wakeup resource also leaves the group, as in the original.
func (s *server) resourcesUnsubscribe(req request, uri string) (any, *rpcError) {
	if !isWakeupURI(uri) {
		s.subs.unsubscribe(uri)
		return object{}, nil
	}
	g, c, err := s.subs.authorizedWakeup(uri)
	if err == nil {
		err = retryBusy(func() error { return s.store.leaveGroup(g, c, "", false) })
	}
	if err != nil {
		return nil, resourceError("", err) // "": Invalid params in every revision
	}
	s.subs.revoke(uri)
	return object{}, nil
}

// listen runs a 2026-07-28 subscriptions/listen as an in-flight request: it
// acknowledges the URIs it can honour and forwards their resources/updated,
// tagged with the subscription id, until cancelled (no answer) or the session
// closes (a completion result). Lists never change, so no list-changed flags.
func (s *server) listen(req request, meta requestMeta) *rpcError {
	var p struct {
		Notifications *struct {
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"notifications"`
	}
	if req.params == nil || json.Unmarshal(req.params, &p) != nil || p.Notifications == nil {
		return errInvalidParams("subscriptions/listen notifications must be an object.")
	}
	uris := s.listenURIs(p.Notifications.ResourceSubscriptions)
	return s.inflight.start(req.id, meta.progressToken, func(r *inflightRequest) (any, *rpcError) {
		tag := object{{metaSubscriptionID, rawJSON(req.id)}}
		ack := object{{"_meta", tag}, {"notifications", object{{"resourceSubscriptions", stringList(uris)}}}}
		if err := r.notify("notifications/subscriptions/acknowledged", ack); err != nil {
			return nil, errInternal
		}
		subs := newSubscriptions(s.store, s.subs.interval, func(method string, params object) error {
			return r.notify(method, append(object{{"_meta", tag}}, params...))
		})
		subs.speaksFor = s.cfg.speaksFor
		subs.followWatch(s.changes)
		for _, uri := range uris {
			if isWakeupURI(uri) {
				subs.authorize(uri)
			}
			if err := retryBusy(func() error { return subs.subscribe(uri) }); err != nil {
				logf("subscriptions/listen %s: %v", uri, err)
			}
		}
		<-r.ctx.Done()
		subs.close()
		return object{{"resultType", "complete"}, {"_meta", tag}}, nil
	})
}

// listenURIs keeps, once each, the requested URIs a listen may watch: a
// group URI of an existing group, or a wakeup URI of a current member,
// whose check is retried while the database is busy.
func (s *server) listenURIs(requested []string) []string {
	uris, seen := []string{}, map[string]bool{} // a list may be long: no quadratic look
	for _, uri := range requested {
		if seen[uri] {
			continue
		}
		seen[uri] = true
		err := retryBusy(func() error {
			if isWakeupURI(uri) {
				_, _, err := s.memberWakeup(uri)
				return err
			}
			g, err := parseGroupURI(uri)
			if err == nil {
				_, err = s.store.messageRevision(g)
			}
			return err
		})
		if err == nil {
			uris = append(uris, uri)
		}
	}
	return uris
}

// memberWakeup returns the group and context of a wakeup URI whose context is
// a current member, read from the database: a 2026-07-28 request has no
// session to remember a join_group. speaksFor limits it as for tool calls.
func (s *server) memberWakeup(uri string) (groupID, contextID string, err error) {
	g, c, err := parseWakeupURI(uri)
	if err != nil {
		return "", "", err
	}
	if refused := s.cfg.speaksFor(c); refused != nil {
		return "", "", refused
	}
	members, err := s.store.users(g)
	if err != nil {
		return "", "", err
	}
	if slices.ContainsFunc(members, func(m member) bool { return m.contextID == c }) {
		return g, c, nil
	}
	return "", "", authorizationErrorf("Wakeup resource is only available for a current member of the group. Call join_group first.")
}

// wakeupAccess authorizes a wakeup URI for a request of rev: by
// membership for a 2026-07-28 request, by the session's join_group before.
func (s *server) wakeupAccess(rev protocolRevision, uri string) (groupID, contextID string, err error) {
	if rev >= revModern {
		return s.memberWakeup(uri)
	}
	return s.subs.authorizedWakeup(uri)
}

// inflight is one session's table of long-running requests, each in its own
// goroutine. After a notifications/cancelled nothing more is written for one:
// 2026-07-28 says MUST NOT, older revisions SHOULD NOT.
type inflight struct {
	out messageWriter
	// ctx is every request's parent; close cancels it, after which start
	// refuses, so that no request outlives close or takes mail for an ended
	// session, and wg is never added to while close waits.
	ctx context.Context
	end context.CancelFunc

	mu   sync.Mutex
	reqs map[string]*inflightRequest // by the request id's raw JSON
	wg   sync.WaitGroup
}

// inflightRequest is one running request; its ctx ends on cancel or session close.
type inflightRequest struct {
	id, progressToken json.RawMessage // progressToken is nil when the request carried none
	out               messageWriter
	ctx               context.Context
	cancel            context.CancelFunc

	// mu orders every write for this request against cancellation, so a
	// cancelled request is never written to after cancel returns.
	mu        sync.Mutex
	cancelled bool // by the client: suppress everything from now on
}

// errDuplicateID answers a request whose id is still in flight, which
// notifications/cancelled could then no longer tell apart.
var errDuplicateID = &rpcError{-32600, "Invalid Request: request id is already in use"}

func newInflight(ctx context.Context, out messageWriter) *inflight {
	ctx, end := context.WithCancel(ctx)
	return &inflight{out: out, ctx: ctx, end: end, reqs: map[string]*inflightRequest{}}
}

// start runs work for the request id in its own goroutine and writes its
// answer (never a nil result without an error) when it returns, unless the
// request was cancelled; work should return soon after r.ctx is done. An id
// already in flight gets errDuplicateID, and nothing runs.
func (t *inflight) start(id, progressToken json.RawMessage, work func(r *inflightRequest) (any, *rpcError)) *rpcError {
	key := string(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.reqs[key]; dup {
		return errDuplicateID
	}
	if t.ctx.Err() != nil {
		return errInternal // the session has ended: nobody reads the answer
	}
	ctx, cancel := context.WithCancel(t.ctx)
	r := &inflightRequest{id: id, progressToken: progressToken, out: t.out, ctx: ctx, cancel: cancel}
	t.reqs[key] = r
	t.wg.Go(func() {
		result, err := work(r)
		t.mu.Lock()
		delete(t.reqs, key)
		t.mu.Unlock()
		r.cancel()
		if werr := r.deliver(response(request{id: id}, result, err), true); werr != nil {
			logf("write answer to request %s: %v", id, werr)
		}
	})
	return nil
}

// deliver writes one message for r unless the client has cancelled it.
func (r *inflightRequest) deliver(message any, answer bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelled {
		return nil
	}
	return r.out.writeFor(r.id, message, answer)
}

// cancel ends the running request with raw id after a notifications/cancelled,
// before its answer (a nil one ends its HTTP stream), and reports whether
// there was one; unknown ids are ignored, as allowed.
func (t *inflight) cancel(id json.RawMessage) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.reqs[string(id)]
	if ok {
		r.mu.Lock()
		r.cancelled = true
		r.out.writeFor(r.id, nil, true)
		r.mu.Unlock()
		r.cancel()
	}
	return ok
}

// close ends every running request and waits for them; their answers are
// still written (the client did not cancel them), and a failed write only logs.
func (t *inflight) close() {
	t.mu.Lock()
	t.end()
	t.mu.Unlock()
	t.wg.Wait()
}

// notify writes a notification for r unless the client has cancelled it.
func (r *inflightRequest) notify(method string, params object) error {
	return r.deliver(object{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}}, false)
}

// progress writes notifications/progress for r when the request carried a
// progressToken; total and message are left out when zero and empty.
func (r *inflightRequest) progress(progress, total int64, message string) error {
	if r.progressToken == nil {
		return nil
	}
	params := object{{"progressToken", rawJSON(r.progressToken)}, {"progress", progress}}
	if total > 0 {
		params = append(params, field{"total", total})
	}
	if message != "" {
		params = append(params, field{"message", message})
	}
	return r.notify("notifications/progress", params)
}

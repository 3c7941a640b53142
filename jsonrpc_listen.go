package main

import (
	"encoding/json"
	"slices"
)

// listenFilter is subscriptions/listen's notifications filter. Only
// resourceSubscriptions is honoured: the tool, prompt and resource lists of
// this server never change, so the list-changed flags are left out of the
// acknowledgement, as the revision says for unsupported types.
type listenFilter struct {
	ResourceSubscriptions []string `json:"resourceSubscriptions"`
}

// listen opens a 2026-07-28 subscriptions/listen stream as an in-flight
// request: it acknowledges the URIs it can honour, then forwards their
// notifications/resources/updated tagged with the subscription id until the
// client cancels it (no answer then) or the session closes (a completion
// result then).
func (s *server) listen(req request, meta requestMeta) *rpcError {
	var p struct {
		Notifications *listenFilter `json:"notifications"`
	}
	if req.params == nil || json.Unmarshal(req.params, &p) != nil || p.Notifications == nil {
		return errInvalidParams("subscriptions/listen notifications must be an object.")
	}
	subID := rawJSON(req.id)
	uris := s.listenURIs(p.Notifications.ResourceSubscriptions)
	return s.inflight.start(req.id, meta.progressToken, func(r *inflightRequest) (any, *rpcError) {
		tag := object{{metaSubscriptionID, subID}}
		ack := object{{"_meta", tag}, {"notifications", object{{"resourceSubscriptions", stringList(uris)}}}}
		if err := r.notify("notifications/subscriptions/acknowledged", ack); err != nil {
			return nil, errInternal
		}
		subs := newSubscriptions(s.store, s.subs.interval, func(method string, params object) error {
			return r.notify(method, append(object{{"_meta", tag}}, params...))
		})
		subs.followWatch(s.changes)
		for _, uri := range uris {
			if isWakeupURI(uri) {
				subs.authorize(uri)
			}
			if err := retryBusy(func() error { return subs.subscribe(uri) }); err != nil {
				logf("subscriptions/listen %s: %v", uri, err)
			}
		}
		<-r.done()
		subs.close()
		return object{{"resultType", "complete"}, {"_meta", tag}}, nil
	})
}

// listenURIs keeps the requested URIs this server can watch, once each
// (canListen says which).
func (s *server) listenURIs(requested []string) []string {
	uris := []string{}
	for _, uri := range requested {
		if slices.Contains(uris, uri) {
			continue
		}
		var ok bool
		if retryBusy(func() (err error) { ok, err = s.canListen(uri); return err }) == nil && ok {
			uris = append(uris, uri)
		}
	}
	return uris
}

// canListen reports whether a listen may watch uri: a group URI of an
// existing group, or a wakeup URI of a current member. Only a busy database
// is an error, so that the caller can retry.
func (s *server) canListen(uri string) (bool, error) {
	if isWakeupURI(uri) {
		_, _, err := s.memberWakeup(uri)
		if isBusy(err) {
			return false, err
		}
		return err == nil, nil
	}
	g, err := parseGroupURI(uri)
	if err != nil {
		return false, nil
	}
	_, err = s.store.messageRevision(g)
	return err == nil, nil
}

// errWakeupNotMember answers a 2026-07-28 request for the wakeups of a
// context that is not a current member of the group.
var errWakeupNotMember = authorizationErrorf("Wakeup resource is only available for a current member of the group. Call join_group first.")

// memberWakeup returns the group and context of a wakeup URI whose context
// is a current member of the group. It is how a 2026-07-28 request, which
// has no session that could remember a join_group, is authorized: by the
// same membership join_group checks, read from the database, so that any
// process or transport answers alike. A session that may speak only for
// some contexts (a per-agent token, the stdio pin) reads only their wakeups.
func (s *server) memberWakeup(uri string) (groupID, contextID string, err error) {
	g, c, err := parseWakeupURI(uri)
	if err != nil {
		return "", "", err
	}
	if s.cfg.speaksFor != nil {
		if refused := s.cfg.speaksFor(c); refused != nil {
			return "", "", refused
		}
	}
	members, err := s.store.users(g)
	if err != nil {
		return "", "", err
	}
	for _, m := range members {
		if m.contextID == c {
			return g, c, nil
		}
	}
	return "", "", errWakeupNotMember
}

// wakeupAccess authorizes a wakeup URI for a request of rev: by
// membership for a 2026-07-28 request, by the session's join_group before.
func (s *server) wakeupAccess(rev protocolRevision, uri string) (groupID, contextID string, err error) {
	if rev >= revModern {
		return s.memberWakeup(uri)
	}
	return s.subs.authorizedWakeup(uri)
}

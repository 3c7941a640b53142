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
		subs.follow(s.changes)
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

// listenURIs keeps the requested URIs this server can watch, once each:
// group URIs of existing groups, and wakeup URIs of contexts that are
// current members of their group. Membership is what join_group checks
// before it authorizes a session, and a stateless request has no session
// that could remember a join_group.
func (s *server) listenURIs(requested []string) []string {
	uris := []string{}
	for _, uri := range requested {
		if slices.Contains(uris, uri) {
			continue
		}
		var ok bool
		err := retryBusy(func() error {
			var err error
			ok, err = s.canListen(uri)
			return err
		})
		if err == nil && ok {
			uris = append(uris, uri)
		}
	}
	return uris
}

func (s *server) canListen(uri string) (bool, error) {
	if !isWakeupURI(uri) {
		g, err := parseGroupURI(uri)
		if err != nil {
			return false, nil
		}
		_, err = s.store.messageRevision(g)
		return err == nil, nil
	}
	g, c, err := parseWakeupURI(uri)
	if err != nil {
		return false, nil
	}
	members, err := s.store.users(g)
	if isBusy(err) {
		return false, err
	} else if err != nil {
		return false, nil
	}
	for _, m := range members {
		if m.contextID == c {
			return true, nil
		}
	}
	return false, nil
}

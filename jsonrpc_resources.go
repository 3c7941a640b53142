package main

import (
	"errors"
)

// resourcesList lists every group's change-signal resource, with a title
// from 2025-06-18 on.
func (s *server) resourcesList(rev protocolRevision) (any, *rpcError) {
	var groups []groupMeta
	if err := retryBusy(func() (err error) { groups, err = s.store.listGroups(); return err }); err != nil {
		logf("resources/list: %v", err)
		return nil, errInternal
	}
	list := make([]any, len(groups))
	for i, g := range groups {
		r := object{{"uri", groupURI(g.groupID)}, {"name", "Crosstalk " + g.groupID}}
		if typed(rev) {
			r = append(r, field{"title", "Group " + g.groupID})
		}
		list[i] = append(r, field{"description", "Group-change signal. A change may not be relevant to this AI; call get_unread_messages to check."},
			field{"mimeType", "application/json"})
	}
	return object{{"resources", list}}, nil
}

// resourceURI returns the uri param of a resources/* request.
func (req request) resourceURI() (string, *rpcError) {
	p, err := req.paramsObject()
	if err != nil {
		return "", err
	}
	if !p.has("uri") {
		return "", nil
	}
	uri, ok := p.str("uri")
	if !ok {
		return "", errInvalidParams("Invalid Crosstalk subscription URI.")
	}
	return uri, nil
}

// resourceError maps a domain or storage error of a resources/* request.
func resourceError(err error) *rpcError {
	var de *domainError
	if errors.As(err, &de) {
		return errInvalidParams(de.msg)
	}
	logf("resource request: %v", err)
	return errInternal
}

// resourcesRead returns a snapshot of a group or of an authorized member's
// wake events, as JSON text.
func (s *server) resourcesRead(req request) (any, *rpcError) {
	uri, rerr := req.resourceURI()
	if rerr != nil {
		return nil, rerr
	}
	var snapshot object
	err := retryBusy(func() error {
		if wuri, ok := receiptsWakeupURI(uri); ok {
			g, c, err := s.wakeupAccess(req.version, wuri)
			if err == nil {
				snapshot, err = s.receiptsSnapshot(g, c)
			}
			return err
		}
		if isWakeupURI(uri) {
			g, c, err := s.wakeupAccess(req.version, uri)
			if err != nil {
				return err
			}
			events, err := s.store.wakeups(g, c)
			if err != nil {
				return err
			}
			list := make([]any, len(events))
			for i, w := range events {
				list[i] = object{{"event_id", w.id}, {"message_id", w.messageID}, {"relevance", w.relevance}, {"priority", w.priority},
					{"created_at", w.createdAt}, {"acknowledged_at", w.readAt}, {"last_notified_at", w.notifiedAt}}
			}
			snapshot = object{{"group_id", g}, {"context_id", c}, {"wakeups", list}}
			return nil
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
		return nil, resourceErrorFor(req.version, err)
	}
	return object{{"contents", []any{object{{"uri", uri}, {"mimeType", "application/json"}, {"text", pyJSON(snapshot)}}}}}, nil
}

// receiptsSnapshot renders the receipts of contextID's newest messages in
// group g: per message, each recipient's state and its times.
func (s *server) receiptsSnapshot(g, contextID string) (object, error) {
	ids, byMessage, err := s.store.sentReceipts(g, contextID)
	messages := make([]any, len(ids))
	for i, id := range ids {
		recipients := make([]any, len(byMessage[id]))
		for k, r := range byMessage[id] {
			recipients[k] = object{{"context_id", r.contextID}, {"name", r.name}, {"state", r.state()},
				{"notified_at", r.notifiedAt}, {"delivered_at", r.deliveredAt}, {"delivered_via", nilIfEmpty(r.deliveredVia)}, {"read_at", r.readAt}}
		}
		messages[i] = object{{"message_id", id}, {"recipients", recipients}}
	}
	return object{{"group_id", g}, {"context_id", contextID}, {"messages", messages}}, err
}

// nilIfEmpty is s, or JSON null for "".
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// resourcesSubscribe starts watching a resource for this session.
func (s *server) resourcesSubscribe(req request) (any, *rpcError) {
	uri, rerr := req.resourceURI()
	if rerr != nil {
		return nil, rerr
	}
	if err := retryBusy(func() error { return s.subs.subscribe(uri) }); err != nil {
		return nil, resourceErrorFor(req.version, err)
	}
	return object{}, nil
}

// resourcesUnsubscribe stops a subscription. Unsubscribing a joined
// context's wakeup resource also leaves the group, as in the original.
func (s *server) resourcesUnsubscribe(req request) (any, *rpcError) {
	uri, rerr := req.resourceURI()
	if rerr != nil {
		return nil, rerr
	}
	if !isWakeupURI(uri) {
		s.subs.unsubscribe(uri)
		return object{}, nil
	}
	g, c, err := s.subs.authorizedWakeup(uri)
	if err == nil {
		err = retryBusy(func() error { return s.store.leaveGroup(g, c, "", false) })
	}
	if err != nil {
		return nil, resourceError(err)
	}
	s.subs.revoke(uri)
	return object{}, nil
}

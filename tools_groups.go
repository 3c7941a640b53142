package main

// This file holds the handlers of the tools that manage groups and their
// members, each named after its tool (toolGetUsers is get_users); the
// message tools are in tools_messages.go. The table in tools.go lists them.

func toolCreateGroup(s *server, a toolArgs) (any, error) {
	contextID, err := a.nonEmpty("context_id")
	if err != nil {
		return nil, err
	}
	name, nameOK := a.str("name")
	desc, descOK := a.str("description")
	if (a.has("name") && !nameOK) || (a.has("description") && !descOK) {
		return nil, validationErrorf("name and description must be strings.")
	}
	return metaResult(s.store.createGroup(contextID, name, desc))
}

func toolListGroups(s *server, _ toolArgs) (any, error) {
	groups, err := s.store.listGroups()
	if err != nil {
		return nil, err
	}
	return object{{"groups", mapSlice(groups, func(g groupMeta) any { return metaObject(g) })}}, nil
}

func toolGetGroupMetadata(s *server, a toolArgs) (any, error) {
	return metaResult(s.store.groupMetadata(a.groupID()))
}

func toolUpdateGroupMetadata(s *server, a toolArgs) (any, error) {
	contextID, err := a.nonEmpty("context_id")
	if err != nil {
		return nil, err
	}
	if a.isNull("name") && a.isNull("description") {
		return nil, validationErrorf("Provide name and/or description to update group metadata.")
	}
	var update [2]*string // name and description; nil keeps one as it is
	for i, key := range []string{"name", "description"} {
		if a.isNull(key) {
			continue
		}
		v, ok := a.str(key)
		if !ok {
			return nil, validationErrorf("%s must be a string.", key)
		}
		update[i] = &v
	}
	return metaResult(s.store.updateGroupMetadata(a.groupID(), contextID, update[0], update[1]))
}

func toolGetUsers(s *server, a toolArgs) (any, error) {
	members, err := s.store.users(a.groupID())
	if err != nil {
		return nil, err
	}
	return object{{"users", mapSlice(members, func(m member) any {
		return object{{"context_id", m.contextID}, {"name", m.name}, {"joined_at", m.joinedAt}, {"latest_message_id", m.latestMessageID}}
	})}}, nil
}

func toolDeleteGroup(s *server, a toolArgs) (any, error) {
	contextID, err := a.nonEmpty("context_id")
	if err != nil {
		return nil, err
	}
	id := a.groupID()
	if err := s.store.deleteGroup(id, contextID); err != nil {
		return nil, err
	}
	return object{{"group_id", id}, {"deleted", true}}, nil
}

func toolJoinGroup(s *server, a toolArgs) (any, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return nil, err
	}
	id := a.groupID()
	if err := s.store.joinGroup(id, contextID, name); err != nil {
		return nil, err
	}
	uri := wakeupURI(id, contextID)
	if !a.stateless {
		// The session is now subscribed to its own wakeups. A 2026-07-28
		// client opens subscriptions/listen instead, which authorizes by
		// membership (jsonrpc_resources.go).
		s.subs.authorize(uri)
		if err := s.subs.subscribe(uri); err != nil {
			return nil, err
		}
	}
	return object{{"group_id", id}, {"joined", true}, {"wakeup_resource_uri", uri}}, nil
}

func toolLeaveGroup(s *server, a toolArgs) (any, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return nil, err
	}
	id := a.groupID()
	if err := s.store.leaveGroup(id, contextID, name, true); err != nil {
		return nil, err
	}
	s.subs.revoke(wakeupURI(id, contextID))
	return object{{"group_id", id}, {"left", true}}, nil
}

// metaResult answers a tool with a group's metadata, or with err.
func metaResult(m groupMeta, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return metaObject(m), nil
}

// metaObject renders a group's metadata with the original's keys; the
// timestamps are left out for a catalog row that has none.
func metaObject(m groupMeta) object {
	o := object{{"group_id", m.groupID}, {"name", m.name}, {"description", m.description}}
	if m.updatedAt != nil || m.createdAt != nil {
		o = append(o, field{"created_at", m.createdAt}, field{"updated_at", m.updatedAt})
	}
	return o
}

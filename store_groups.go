package main

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// groupMeta is a group's metadata as get_group_metadata and the catalog
// report it. createdAt is nil only for catalog rows written without one;
// creator is read from the group's own metadata, never from the catalog.
type groupMeta struct {
	groupID     string
	name        string
	description string
	createdAt   *string
	updatedAt   *string
	creator     string
}

// createGroup makes a new group database owned by contextID. A failure
// leaves no file behind, so a retried call leaves no orphan: initGroup's
// build removes its own, and a group built but not read back (a disk with
// no room for its -shm file) is removed here.
func (s *store) createGroup(contextID, name, description string) (groupMeta, error) {
	id := "grp_" + randomHex(16)
	err := s.initGroup(id, contextID, name, description)
	if err == nil {
		var meta groupMeta
		if meta, err = s.catalogGroup(context.Background(), id); err == nil {
			return meta, nil
		}
		s.forget(id)
		removeDatabaseFiles(s.groupPath(id))
	}
	return groupMeta{}, fmt.Errorf("create group %s: %w", id, err)
}

// catalogGroup reads group id's metadata and records it in the catalog, an
// index that listGroups repairs, so a failure to write it (within ctx) is
// only logged.
func (s *store) catalogGroup(ctx context.Context, id string) (groupMeta, error) {
	meta, err := s.groupMetadata(id)
	if err != nil {
		return groupMeta{}, err
	}
	if err := s.catalogExec(ctx, "INSERT INTO groups(group_id, name, description, created_at, updated_at) VALUES (?, ?, ?, ?, COALESCE(?, '')) "+
		"ON CONFLICT(group_id) DO UPDATE SET name = excluded.name, description = excluded.description, "+
		"created_at = excluded.created_at, updated_at = excluded.updated_at",
		meta.groupID, meta.name, meta.description, meta.createdAt, meta.updatedAt); err != nil {
		logf("update catalog for %s: %v", meta.groupID, err)
	}
	return meta, nil
}

// catalogExec runs one statement on the catalog, retrying while it is busy
// until ctx ends; once it has ended, it does not try.
func (s *store) catalogExec(ctx context.Context, query string, args ...any) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return retryBusyContext(ctx, func() error {
		cat, err := s.catalog()
		if err == nil {
			_, err = cat.Exec(query, args...)
			if isReadOnly(err) {
				// SQLite opened the handle read-only: the next use opens it afresh.
				s.closeCatalog()
			}
		}
		return err
	})
}

// listGroups returns every group database in dir with its catalog metadata,
// sorted by id. Stale catalog rows are removed and missing ones added, as
// far as the catalog can be written: failing that is only logged. The
// catalog is read first, so a group created or deleted meanwhile is at most
// missing from its rows (and repaired), never dropped or reported damaged.
// The repairs share one busy window: the catalog is also the audit log,
// whose clean-up may hold its write lock for seconds, and a wait for each
// row would hold list_groups for as many windows.
func (s *store) listGroups() ([]groupMeta, error) {
	cat, err := s.catalog()
	if err != nil {
		return nil, err
	}
	catalog, err := queryAll(context.Background(), cat, func(row rowScanner) (m groupMeta, err error) {
		return m, row.Scan(&m.groupID, &m.name, &m.description, &m.createdAt, &m.updatedAt)
	}, "SELECT group_id, name, description, created_at, updated_at FROM groups")
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	// The group databases in dir, regular files only (opening a FIFO blocks).
	onDisk := setOf(slices.DeleteFunc(groupFiles(s.dir), func(id string) bool { return !s.groupExists(id) }))
	repair, cancel := context.WithTimeoutCause(context.Background(), busyRetryWindow, errors.New("catalog still locked; repair left to the next list"))
	defer cancel()
	groups := make([]groupMeta, 0, len(onDisk))
	for _, m := range catalog {
		if !onDisk[m.groupID] {
			if err := s.catalogExec(repair, "DELETE FROM groups WHERE group_id = ?", m.groupID); err != nil {
				logf("remove stale catalog row %s: %v", m.groupID, err)
			}
			continue
		}
		groups = append(groups, m)
		delete(onDisk, m.groupID)
	}
	for id := range onDisk {
		// A group missing from the catalog may be a file no server can use
		// (see checkGroupFile): skip it rather than list it forever.
		if problem := checkGroupFile(s.groupPath(id)); problem != nil {
			s.damaged.warn(s.groupPath(id), problem)
			continue
		}
		m, err := s.catalogGroup(repair, id)
		if err != nil {
			m = groupMeta{groupID: id}
		}
		groups = append(groups, m)
	}
	slices.SortFunc(groups, func(a, b groupMeta) int { return strings.Compare(a.groupID, b.groupID) })
	return groups, nil
}

// groupMetadata reads a group's metadata row.
func (s *store) groupMetadata(id string) (groupMeta, error) {
	m := groupMeta{groupID: id}
	err := s.withGroup(id, func(db *sql.DB) error {
		_, err := rowFound(db.QueryRow("SELECT name, description, created_at, updated_at, creator_context_id FROM group_metadata WHERE id = 1").
			Scan(&m.name, &m.description, &m.createdAt, &m.updatedAt, &m.creator))
		return err
	})
	return m, err
}

// updateGroupMetadata changes name and/or description; only the creator may.
func (s *store) updateGroupMetadata(id, contextID string, name, description *string) (groupMeta, error) {
	err := s.writeGroup(id, func(tx groupTx) error {
		var creator string
		err := tx.QueryRow("SELECT creator_context_id FROM group_metadata WHERE id = 1").Scan(&creator)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && creator != contextID) {
			return authorizationErrorf("Only the context that created this group can update its metadata.")
		}
		if err != nil {
			return err
		}
		// A nil name or description binds NULL, which keeps the stored value.
		if _, err := tx.Exec("UPDATE group_metadata SET name = COALESCE(?, name), description = COALESCE(?, description), updated_at = ? WHERE id = 1",
			name, description, s.timestamp()); err != nil {
			return err
		}
		return bumpRevisions(tx, "metadata_revision")
	})
	if err != nil {
		return groupMeta{}, err
	}
	return s.catalogGroup(context.Background(), id)
}

// deleteGroup removes a group's database, sidecar files and catalog row;
// only the creator may. It closes this process's handle first: writes
// through a handle on a deleted file would be lost.
func (s *store) deleteGroup(id, contextID string) error {
	if err := validateGroupID(id); err != nil {
		return err
	}
	if !s.groupExists(id) {
		return &domainError{category: categoryNotFound,
			msg: "Group does not exist: " + id + ". It may already have been deleted."}
	}
	meta, err := s.groupMetadata(id)
	if err != nil {
		return err
	}
	if meta.creator == "" || meta.creator != contextID {
		return authorizationErrorf("Only the context that created this group can delete it.")
	}
	s.forget(id)
	if err := removeDatabaseFiles(s.groupPath(id)); err != nil {
		return fmt.Errorf("delete group %s: %w", id, err)
	}
	if err := s.catalogExec(context.Background(), "DELETE FROM groups WHERE group_id = ?", id); err != nil {
		logf("remove catalog row for %s: %v", id, err)
	}
	return nil
}

// bumpRevisions advances by one each of the named group_state counters,
// which observers poll.
func bumpRevisions(tx groupTx, columns ...string) error {
	set := mapSlice(columns, func(c string) string { return c + " = " + c + " + 1" })
	_, err := tx.Exec("UPDATE group_state SET " + strings.Join(set, ", ") + " WHERE id = 1")
	return err
}

// member is one row of get_users.
type member struct {
	contextID       string
	name            string
	joinedAt        string
	latestMessageID *int64
}

// users lists a group's members ordered by context id.
func (s *store) users(id string) ([]member, error) {
	var members []member
	err := s.withGroup(id, func(db *sql.DB) (err error) {
		members, err = queryAll(context.Background(), db, func(row rowScanner) (m member, err error) {
			return m, row.Scan(&m.contextID, &m.name, &m.joinedAt, &m.latestMessageID)
		}, "SELECT context_id, name, joined_at, latest_message_id FROM group_members ORDER BY context_id")
		return err
	})
	return members, err
}

// joinGroup adds contextID as a member with every existing message unread,
// or renames an existing member.
func (s *store) joinGroup(id, contextID, name string) error {
	return s.writeGroup(id, func(tx groupTx) error {
		res, err := tx.Exec("UPDATE group_members SET name = ? WHERE context_id = ?", name, contextID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if _, err := tx.Exec("INSERT INTO group_members(context_id, name, joined_at, unread_count) SELECT ?, ?, ?, COUNT(*) FROM messages",
				contextID, name, s.timestamp()); err != nil {
				return err
			}
			if _, err := tx.Exec("INSERT INTO member_unread_messages(context_id, message_id) SELECT ?, id FROM messages", contextID); err != nil {
				return err
			}
		}
		return bumpRevisions(tx, "member_revision")
	})
}

// leaveGroup removes a member, its unread rows and its wake events. With
// checkName false the stored identity is used (resources/unsubscribe).
func (s *store) leaveGroup(id, contextID, name string, checkName bool) error {
	return s.writeGroup(id, func(tx groupTx) error {
		if checkName {
			if _, err := requireMember(tx.QueryRow, contextID, name); err != nil {
				return err
			}
		}
		res, err := tx.Exec("DELETE FROM group_members WHERE context_id = ?", contextID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return authorizationErrorf("Context is not a member of this group.")
		}
		if _, err := tx.Exec("DELETE FROM member_unread_messages WHERE context_id = ?", contextID); err != nil {
			return err
		}
		res, err = tx.Exec("DELETE FROM wakeup_events WHERE context_id = ?", contextID)
		if err != nil {
			return err
		}
		revisions := []string{"member_revision"}
		if n, _ := res.RowsAffected(); n > 0 {
			revisions = append(revisions, "wakeup_revision")
		}
		return bumpRevisions(tx, revisions...)
	})
}

// requireMember reads with queryRow the member's latest sent message id, or
// the original's authorization errors when contextID has not joined under name.
func requireMember(queryRow func(string, ...any) rowScanner, contextID, name string) (int64, error) {
	var joined string
	var latest sql.NullInt64
	err := queryRow("SELECT name, latest_message_id FROM group_members WHERE context_id = ?", contextID).Scan(&joined, &latest)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errNotJoined
	}
	if err != nil {
		return 0, err
	}
	if joined != name {
		return 0, errNameMismatch
	}
	return latest.Int64, nil
}

// randomHex returns n random bytes as lowercase hex, like uuid4().hex.
func randomHex(n int) string {
	b := make([]byte, n)
	crand.Read(b)
	return hex.EncodeToString(b)
}

// removeDatabaseFiles deletes a database, its -wal and -shm files and the -wq lock file of earlier
// builds. Like the original, it stops at the first it cannot remove, so a kept database keeps its -wal.
func removeDatabaseFiles(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-wq"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// groupFiles returns the ids of the group files in dir, sorted. The
// directory is read, not globbed: filepath.Glob takes a [, * or ? in the
// directory's own path as a pattern. A directory that cannot be read holds
// no group, as for Glob and the original's glob.
func groupFiles(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var ids []string
	for _, e := range entries {
		if id, ok := groupIDOfFile(e.Name()); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

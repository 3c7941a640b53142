package main

import (
	"database/sql"
	"errors"
	"strings"
)

// searchTrigger is the original's trigger that indexes each new message for
// search, with its whitespace collapsed: the original and this server store
// it with different indentation.
const searchTrigger = "CREATE TRIGGER messages_search_after_insert AFTER INSERT ON messages BEGIN " +
	"INSERT INTO message_search(rowid, content) VALUES (new.id, new.content); END"

// insertHuge inserts p, whose text is hugeLine bytes or more, and indexes it
// for search itself instead of through searchTrigger, which it reports
// false for when the group's trigger is not exactly that one.
//
// An AFTER INSERT trigger that reads new.content makes SQLite hold one more
// copy of the row's text, on top of the bound parameter and the row's
// record: for a 200 MiB message that copy alone is 170 MB more at the
// peak. So, in the send's transaction, the trigger is dropped, the row
// inserted, the index given exactly the row the trigger would have given it,
// and the trigger created again from its own stored text. Nobody ever sees
// the trigger missing: other connections, the original's included, read
// committed snapshots, and the transaction commits all of it or nothing.
func (b sendBatch) insertHuge(p routedSend) (id int64, ok bool, err error) {
	var stored string
	err = b.tx.QueryRow("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'messages_search_after_insert' AND tbl_name = 'messages'").Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case strings.Join(strings.Fields(stored), " ") != searchTrigger:
		return 0, false, nil
	}
	if _, err := b.tx.Exec("DROP TRIGGER messages_search_after_insert"); err != nil {
		return 0, false, err
	}
	if id, err = b.insertRows([]routedSend{p}); err != nil {
		return 0, false, err
	}
	if _, err := b.tx.Exec("INSERT INTO message_search(rowid, content) VALUES (?, ?)", id, p.msg.text); err != nil {
		return 0, false, err
	}
	if _, err := b.tx.Exec(stored); err != nil {
		return 0, false, err
	}
	return id, true, nil
}

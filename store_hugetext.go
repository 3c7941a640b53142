package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"

	"modernc.org/sqlite"
)

// hugeLine is the line (or message) length from which the stdio transport
// and the store trade a little time for memory: a send_message line holds
// the line, the decoded text, SQLite's bound parameter and row record, and
// the search trigger's copy, and with Go's collector left to itself a
// 200 MiB line peaked at more than 6× its size.
const hugeLine = 16 << 20

// releaseMemory collects garbage and returns freed pages to the operating
// system; it runs only around lines of hugeLine bytes or more.
func releaseMemory() { debug.FreeOSMemory() }

// hugeText is the text of one huge message, held in one place so that the
// insert can take the last reference to it once SQLite has bound its own
// copy: two copies at the peak instead of three.
type hugeText struct {
	s     string
	taken bool
}

// errHugeTextTaken refuses a retry of a transaction that failed after
// taking the huge text: it is gone, and must not be stored empty.
var errHugeTextTaken = errors.New("the text of this huge message was released by a failed attempt to store it; send it again")

// sendHuge is sendMessage, in a transaction of its own, for a message whose
// text, hugeLine bytes or more, text holds instead of m.
func (s *store) sendHuge(id string, m outgoing, text *hugeText) (out sent, err error) {
	err = s.writeGroup(id, func(tx groupTx) error {
		if text.taken {
			return errHugeTextTaken
		}
		b := s.newSendBatch(tx, id)
		members, err := groupMembers(tx)
		if err != nil {
			return err
		}
		p, err := b.routed(members, m, text.s)
		if err != nil {
			return err
		}
		first, ok, err := b.insertHuge(p, text)
		if err == nil && !ok {
			p.msg.text = text.s
			first, err = b.insertRows([]routedSend{p})
		}
		if err != nil {
			return err
		}
		out = p.sent(id, first)
		return b.fanOut([]routedSend{p}, first)
	})
	return out, err
}

// searchTrigger is the original's trigger that indexes each new message for
// search, with its whitespace collapsed: the original and this server store
// it with different indentation.
const searchTrigger = "CREATE TRIGGER messages_search_after_insert AFTER INSERT ON messages BEGIN " +
	"INSERT INTO message_search(rowid, content) VALUES (new.id, new.content); END"

// releaseTextSQL is the SQL function crosstalk_release_text(token, value),
// registered on every connection of this process. In an INSERT column after
// the text's, it runs after SQLite copied the bound text and before it
// builds the row's record: it drops the text registered under token,
// releases the memory, and returns value. No group file refers to it.
const releaseTextSQL = "crosstalk_release_text"

// boundTexts maps a token to the argument that carries the text of a huge
// insert now running, for releaseTextSQL. Tokens are random, so SQL that is
// not insertHuge's (a trigger someone added to a group file) cannot name
// one: for any other token the function does nothing.
var boundTexts sync.Map // int64 → *driver.NamedValue

// init registers releaseTextSQL before any connection is opened: the driver
// adds a registered function only to connections opened after it.
func init() {
	sqlite.MustRegisterScalarFunction(releaseTextSQL, 2, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if arg, ok := boundTexts.LoadAndDelete(args[0]); ok {
			arg.(*driver.NamedValue).Value = nil
			releaseMemory()
		}
		return args[1], nil
	})
}

// insertHuge inserts p, whose text is hugeLine bytes or more, and indexes it
// for search itself instead of through searchTrigger, whose read of
// new.content holds one more copy (170 MB at the peak of a 200 MiB
// message); ok is false, and nothing done, when the group's trigger is not
// exactly that one. The trigger is dropped and recreated from its stored
// text inside the send's transaction, so no other connection sees it
// missing.
func (b sendBatch) insertHuge(p routedSend, text *hugeText) (id int64, ok bool, err error) {
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
	if id, err = b.insertReleasing(p, text); err != nil {
		return 0, false, err
	}
	if _, err := b.tx.Exec("INSERT INTO message_search(rowid, content) SELECT id, content FROM messages WHERE id = ?", id); err != nil {
		return 0, false, err
	}
	if _, err := b.tx.Exec(stored); err != nil {
		return 0, false, err
	}
	return id, true, nil
}

// insertReleasing inserts p's row as insertRows does, with releaseTextSQL
// in routing_reason's place (after content), and returns its id. It goes
// past database/sql, which keeps every argument until the statement ends.
func (b sendBatch) insertReleasing(p routedSend, text *hugeText) (int64, error) {
	token := rand.Int64()
	args := []driver.NamedValue{{Ordinal: 1, Value: p.msg.contextID}, {Ordinal: 2, Value: p.msg.name}, {Ordinal: 3, Value: text.s},
		{Ordinal: 4, Value: p.now}, {Ordinal: 5, Value: p.msg.priority}, {Ordinal: 6, Value: pyJSON(stringList(p.route.mentions))},
		{Ordinal: 7, Value: pyJSON(stringList(p.ids))}, {Ordinal: 8, Value: p.route.reason}, {Ordinal: 9, Value: token}}
	text.s, text.taken = "", true
	boundTexts.Store(token, &args[2])
	defer boundTexts.Delete(token)
	var lastID int64
	err := b.tx.h.conn.Raw(func(dc any) error {
		ec, ok := dc.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("the sqlite connection cannot execute directly (%T)", dc)
		}
		res, err := ec.ExecContext(context.Background(), insertMessagesSQL+"(?1, ?2, ?3, ?4, ?5, ?6, ?7, "+releaseTextSQL+"(?9, ?8))", args)
		if err != nil {
			return err
		}
		lastID, err = res.LastInsertId()
		return err
	})
	return lastID, err
}

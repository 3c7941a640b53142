package main

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// domainError is a refusal the agent reads, as an isError tool result whose
// text is {"error": msg} or as a resources/* -32602 message: msg is the
// original's wording, and category is what the audit log counts it under.
type domainError struct {
	category string
	msg      string
}

// Error returns the agent-facing message.
func (e *domainError) Error() string { return e.msg }

// Error categories, shared with the audit log and the original's README.
const (
	categoryValidation    = "validation"
	categoryNotFound      = "not_found"
	categoryAuthorization = "authorization"
	categoryBusy          = "sqlite_busy"
	categoryInternal      = "internal"
)

// validationErrorf is a refusal of a malformed value.
func validationErrorf(format string, args ...any) *domainError {
	return &domainError{category: categoryValidation, msg: fmt.Sprintf(format, args...)}
}

// authorizationErrorf is a refusal of a caller that may not do this.
func authorizationErrorf(format string, args ...any) *domainError {
	return &domainError{category: categoryAuthorization, msg: fmt.Sprintf(format, args...)}
}

// The original's answers once the retry window is spent, and to a caller
// that has not joined a group or names itself otherwise than it joined;
// errWakeupNotAuthorized keeps a wakeup URI alone from granting access.
var (
	errGroupBusy = &domainError{category: categoryBusy,
		msg: "Cannot complete operation because the group is busy. Please try again in a moment."}
	errNotJoined           = authorizationErrorf("Context has not joined this group. Call join_group first.")
	errNameMismatch        = authorizationErrorf("name does not match this context's joined group name. Call join_group to update it.")
	errWakeupNotAuthorized = authorizationErrorf("Wakeup resource is not authorized for this MCP session. Call join_group first.")
)

// groupNotFound answers an operation on a group whose file does not exist.
func groupNotFound(id string) *domainError {
	return &domainError{category: categoryNotFound,
		msg: "Group does not exist: " + id + ". Create it first or check the group_id."}
}

// classify maps an error of a tool call to the agent-facing error of the
// original. The store returns SQLite and file errors bare, without the
// lowercase context used elsewhere, because classify puts their text into
// the agent's message, and the original's carries no such context.
func classify(toolName string, err error) *domainError {
	var de *domainError
	var se *sqlite.Error
	switch {
	case errors.As(err, &de):
		return de
	case isBusy(err):
		return errGroupBusy
	case errors.As(err, &se):
		return &domainError{category: categoryInternal, msg: "Database error while processing " + toolName + ": " + sqliteMessage(se)}
	}
	return &domainError{category: categoryInternal, msg: "Storage error while processing " + toolName + ": " + pyOSError(err)}
}

// pyOSError words a file error as the original's Python OSError does: "[Errno 1] Operation not permitted: '/path'".
func pyOSError(err error) string {
	var pe *fs.PathError
	var errno syscall.Errno
	if !errors.As(err, &pe) || !errors.As(pe.Err, &errno) {
		return err.Error()
	}
	return fmt.Sprintf("[Errno %d] %s: '%s'", int(errno), strings.ToUpper(errno.Error()[:1])+errno.Error()[1:], pe.Path)
}

// sqliteCodeSuffix is what the driver appends to SQLite's message.
var sqliteCodeSuffix = regexp.MustCompile(` \(\d+\)( \(SQLITE_[A-Z_]+\))?$`)

// sqliteMessage is SQLite's own message without the driver's code suffix,
// as Python's sqlite3 module reports it ("database or disk is full"). A
// -shm file SQLite could not extend, on a disk with no room left for it, is
// the one "disk I/O error" that says "full" instead.
func sqliteMessage(se *sqlite.Error) string {
	if se.Code() == sqlite3.SQLITE_IOERR_SHMSIZE {
		return "database or disk is full"
	}
	msg := sqliteCodeSuffix.ReplaceAllString(se.Error(), "")
	if _, detail, ok := strings.Cut(msg, ": "); ok {
		return detail
	}
	return msg
}

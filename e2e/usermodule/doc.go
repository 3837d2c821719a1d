// Package usermodule checks the README's recipe for using the library and its adapters
// from a clone, the way a user runs it: in a fresh module outside the repository, with
// the README's `go mod edit` lines, `go mod tidy`, and a program for the library and for
// each adapter, run against a real server. It is a module of its own: the adapters'
// dependencies stay out of the library's go.mod.
package usermodule

//go:build tools

// The tests build the migrate and goose CLIs from this module's requirements (see
// tools_test.go), with build tags that leave out every driver but PostgreSQL's. go mod tidy
// knows nothing of those builds; these imports keep the modules the tagged builds need in
// go.mod and go.sum, so the CLIs come from pinned versions. The tag keeps the file out of
// every build.
package migrations

import (
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"   // migrate -tags pgx5
	_ "github.com/golang-migrate/migrate/v4/database/postgres" // migrate -tags postgres (lib/pq)
	_ "github.com/golang-migrate/migrate/v4/source/file"
	_ "github.com/jackc/pgx/v5/stdlib" // goose's postgres driver
	_ "github.com/joho/godotenv"       // imported by goose's main package
	_ "github.com/mfridman/xflag"      // imported by goose's main package
	_ "github.com/pressly/goose/v3"
)

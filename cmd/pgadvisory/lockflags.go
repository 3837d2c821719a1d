package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pgadvisory/advisory"
)

// lockFlags are --name and --key, the two ways every command that selects a lock names
// it: --name NAME is the lock name, hashed as the library's Manager.Lock hashes it
// (advisory.KeyOf); --key N is the 64-bit key itself, the signed decimal number status
// prints in KEY and hash prints. A value of --key that is not such a number is refused,
// never hashed as a name: `status --key 3440577316671208937` once answered "none" for a
// held lock because the number was hashed.
type lockFlags struct {
	name, key, namespace string
}

// lockFlagsHelp is the flag lines of --name and --key, the same in every command's help.
const lockFlagsHelp = `  --name NAME         the lock's name (any UTF-8 text without NUL, up to 4096 bytes),
                      hashed as the library's Manager.Lock does; write --name=NAME for
                      a name that starts with '-'
  --key KEY           the lock's 64-bit key as a signed decimal number, as status
                      prints it in KEY and hash prints it (pg_advisory_lock(bigint)
                      locks; locks taken as pg_advisory_lock(int4, int4), shown as
                      (HI,LO), cannot be selected)
  --namespace NS      with --name: the lock is "NS:NAME", as the library's
                      WithNamespace(NS) names it (NS: no ':' or NUL)
`

func (f *lockFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "the lock's name")
	fs.StringVar(&f.key, "key", "", "the lock's 64-bit key, in decimal")
	fs.StringVar(&f.namespace, "namespace", "", "the namespace of --name, as the library's WithNamespace")
}

// lockTarget is the lock a command works on: always a bigint key (pg_advisory_lock(bigint)),
// and the name it was given as, if any.
type lockTarget struct {
	key   advisory.Key
	name  string
	slots int // run --slots: the target is the semaphore named name, with this many slots
}

// String names the lock with its key: `lock "NAME" (key N)` or `lock N`.
func (t lockTarget) String() string {
	if t.name != "" {
		return fmt.Sprintf(`lock "%s" (key %d)`, t.name, int64(t.key)) // escaped with the whole line
	}
	return fmt.Sprintf("lock %d", int64(t.key))
}

// label names the lock as its holder knows it: `lock "NAME"` or `lock N`; run's
// semaphore (--slots) as `semaphore "NAME" (N slots)`.
func (t lockTarget) label() string {
	switch {
	case t.slots == 1:
		return fmt.Sprintf(`semaphore "%s" (1 slot)`, t.name)
	case t.slots > 1:
		return fmt.Sprintf(`semaphore "%s" (%d slots)`, t.name, t.slots)
	}
	if t.name != "" {
		return fmt.Sprintf(`lock "%s"`, t.name)
	}
	return fmt.Sprintf("lock %d", int64(t.key))
}

// none says that no session holds or waits for the lock, naming its key (and its name).
func (t lockTarget) none() string {
	if t.name != "" {
		return fmt.Sprintf(`no advisory lock with key %d (name "%s") is held or awaited in this database`,
			int64(t.key), t.name)
	}
	return fmt.Sprintf("no advisory lock with key %d is held or awaited in this database "+
		"(a lock taken as pg_advisory_lock(int4, int4) is not selected by --key)", int64(t.key))
}

// target checks --name and --key and returns the lock they select; ok is false when
// neither was given, which is a usage error if required. Both at once, an empty value
// (an unset shell variable) and a --key that is not a 64-bit number are usage errors.
func (f *lockFlags) target(fs *flag.FlagSet, required bool) (t lockTarget, ok bool, err error) {
	nameGiven, keyGiven, nsGiven := false, false, false
	fs.Visit(func(fl *flag.Flag) {
		nameGiven = nameGiven || fl.Name == "name"
		keyGiven = keyGiven || fl.Name == "key"
		nsGiven = nsGiven || fl.Name == "namespace"
	})
	switch {
	case nsGiven && !nameGiven:
		return t, false, usageError(fs.Name(), "--namespace goes with --name (a --key is the key itself, "+
			"as the library's WithNamespace leaves raw keys alone)")
	case nsGiven && f.namespace == "":
		return t, false, usageError(fs.Name(), "--namespace is empty (an unset shell variable?)")
	case nameGiven && keyGiven:
		return t, false, usageError(fs.Name(), "give one of --name NAME and --key KEY, not both")
	case !nameGiven && !keyGiven && required:
		return t, false, usageError(fs.Name(), "give the lock: --name NAME (its name) or --key KEY "+
			"(its 64-bit key, as status prints it)")
	case !nameGiven && !keyGiven:
		return t, false, nil
	case nameGiven:
		return f.named(fs.Name())
	}
	return f.keyed(fs.Name())
}

func (f *lockFlags) named(cmd string) (lockTarget, bool, error) {
	if f.name == "" {
		return lockTarget{}, false, usageError(cmd, "--name is empty (an unset shell variable?)")
	}
	if err := advisory.ValidateName(f.name); err != nil {
		return lockTarget{}, false, usageError(cmd, "--name: %v", err)
	}
	name, err := namespaced(f.namespace, f.name)
	if err != nil {
		return lockTarget{}, false, usageError(cmd, "%v", err)
	}
	return lockTarget{key: advisory.KeyOf(name), name: name}, true, nil
}

// namespaced is name in namespace ns ("" for none) as the library's WithNamespace makes
// it, "NS:NAME", with the same checks: ns non-empty valid UTF-8 of at most MaxNameLen/2
// bytes without ':' or NUL (so that distinct namespaces never make the same name), and
// the result a valid name.
func namespaced(ns, name string) (string, error) {
	if ns == "" {
		return name, nil
	}
	if strings.ContainsAny(ns, ":\x00") || !utf8.ValidString(ns) || len(ns) > advisory.MaxNameLen/2 {
		return "", fmt.Errorf("--namespace \"%s\": want valid UTF-8 of at most %d bytes without ':' or NUL",
			ns, advisory.MaxNameLen/2)
	}
	full := ns + ":" + name
	if err := advisory.ValidateName(full); err != nil {
		return "", fmt.Errorf("--namespace and --name: %w", err)
	}
	return full, nil
}

func (f *lockFlags) keyed(cmd string) (lockTarget, bool, error) {
	if f.key == "" {
		return lockTarget{}, false, usageError(cmd, "--key is empty (an unset shell variable?)")
	}
	k, err := strconv.ParseInt(f.key, 10, 64)
	if err != nil {
		return lockTarget{}, false, usageError(cmd, `--key takes the lock's 64-bit key (a number, as status `+
			`prints it), not "%s"; for the lock name "%s" write %s`, f.key, f.key, nameFlag(f.key))
	}
	return lockTarget{key: advisory.Key(k)}, true, nil
}

// nameFlag is the --name argument that gives the lock name v, quoted for a POSIX shell
// where it needs to be.
func nameFlag(v string) string {
	sep := " "
	if strings.HasPrefix(v, "-") {
		sep = "="
	}
	if strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+,=-") == "" {
		return "--name" + sep + v
	}
	return "--name" + sep + "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

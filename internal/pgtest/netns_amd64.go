package pgtest

// sysSetns is setns(2)'s number on linux/amd64 (the syscall package does not list it).
const sysSetns = 308

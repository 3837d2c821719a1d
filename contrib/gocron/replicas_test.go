package advisorygocron_test

const envReplica = "ADVISORY_GOCRON_REPLICA"

func replicaMain() int { return 0 }

#!/usr/bin/env bash
# Makes sure the servers the integration tests need are running, and installs dynalite
# (DynamoDB for tests) with npm. Safe to run any number of times: it only starts what is
# down and installs only when node_modules is missing.
#
#   PostgreSQL  127.0.0.1:5432   skipped when DATABASE_URL is set
#   RabbitMQ    127.0.0.1:5672   skipped when AMQP_URL is set
#   dynalite    integration/dynalite/node_modules (npm ci); skipped when DYNAMODB_ENDPOINT is set
#   prometheus  Debian's prometheus package (prometheus, promtool) for the alert-rule tests;
#               only installed: each test runs its own server on a free port
#   Redis       127.0.0.1:6379   skipped when REDIS_ADDR is set; installs Debian's
#               redis-server when missing (tests also start private ones on free ports)
#   pgbouncer   Debian's pgbouncer package for the outbox's PgBouncer test; only
#               installed: the test runs its own on a free port
#   NATS        127.0.0.1:4222 with JetStream   skipped when NATS_URL is set; installs
#               Debian's nats-server when missing (natsguard's fault tests start private
#               ones on free ports)
#   MariaDB     127.0.0.1:3306   skipped when MYSQL_DSN is set; installs Debian's
#               mariadb-server when missing, lets root in over TCP without a password
#               and creates the database test (fault tests start private servers)
#
# Kafka (kfake) and SQS run inside the test binaries and need nothing here.
# Exits non-zero, naming the server, when one cannot be made ready.
set -euo pipefail
cd "$(dirname "$0")/.."

wait_port() { # wait_port NAME PORT SECONDS: true once 127.0.0.1:PORT accepts connections
	local name=$1 port=$2 deadline=$((SECONDS + $3))
	until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			echo "services: $name not accepting connections on 127.0.0.1:$port after $3s" >&2
			return 1
		fi
		sleep 0.2
	done
	echo "services: $name ready on 127.0.0.1:$port"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Debian packages the tests need: redis-server, headless Chromium (the admin dashboard
# test) and Prometheus with promtool (the telemetry alert tests). Installed only where
# missing; apt's lists are refreshed once, and only when something is missing.
apt_updated=
apt_install() { # apt_install COMMAND PACKAGE: install PACKAGE unless COMMAND is on PATH
	command -v "$1" >/dev/null 2>&1 && return 0
	if [[ -z "$apt_updated" ]]; then
		echo "services: apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	echo "services: installing $2"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}

if [[ -z "${DATABASE_URL:-}" ]] && ! port_open 5432; then
	echo "services: starting PostgreSQL"
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | tail -n 1)" main start || true
fi
[[ -n "${DATABASE_URL:-}" ]] || wait_port PostgreSQL 5432 60

# No test stops or alarms this broker: the tests that need a broker outage start a
# RabbitMQ node of their own (internal/harness, NewRabbitNode).
if [[ -z "${AMQP_URL:-}" ]] && ! port_open 5672; then
	if rabbitmqctl -q ping >/dev/null 2>&1; then
		echo "services: starting the RabbitMQ application (node already running)"
		rabbitmqctl -q start_app || true
	else
		echo "services: starting RabbitMQ"
		rabbitmq-server -detached || true
	fi
fi
[[ -n "${AMQP_URL:-}" ]] || wait_port RabbitMQ 5672 120

apt_install redis-server redis-server
if [[ -z "${REDIS_ADDR:-}" ]] && ! port_open 6379; then
	echo "services: starting Redis"
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
		--logfile "${TMPDIR:-/tmp}/brokerguard-redis.log" || true
fi
[[ -n "${REDIS_ADDR:-}" ]] || wait_port Redis 6379 30

PATH=$PATH:/usr/sbin apt_install pgbouncer pgbouncer

# No test stops or stalls this server: natsguard's fault tests start nats-servers of
# their own (internal/harness, NewNATSServer). Started as the machine starts it.
PATH=$PATH:/usr/sbin apt_install nats-server nats-server
if [[ -z "${NATS_URL:-}" ]] && ! port_open 4222; then
	echo "services: starting nats-server with JetStream"
	mkdir -p /var/lib/nats-server
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
		-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
fi
[[ -n "${NATS_URL:-}" ]] || wait_port NATS 4222 30
# No test stops this server or makes it read-only: the MySQL outbox's fault tests start
# a MariaDB of their own (internal/harness, NewMariaDB).
if [[ -z "${MYSQL_DSN:-}" ]]; then
	PATH=$PATH:/usr/sbin apt_install mariadbd mariadb-server
	if ! port_open 3306; then
		echo "services: starting MariaDB"
		start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
	fi
	wait_port MariaDB 3306 60
	if ! mariadb --protocol=tcp -h 127.0.0.1 -u root -e 'SELECT 1' >/dev/null 2>&1; then
		# Debian's root logs in through the socket only; the tests connect over TCP.
		echo "services: letting MariaDB's root in over TCP without a password"
		mariadb -u root -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')"
	fi
	mariadb --protocol=tcp -h 127.0.0.1 -u root -e 'CREATE DATABASE IF NOT EXISTS test'
fi

if [[ -z "${DYNAMODB_ENDPOINT:-}" ]]; then
	dir=integration/dynalite
	# The Go harness takes the same lock before installing, so the two never overlap.
	exec 9>"$dir/install.lock"
	flock -w 300 9
	if [[ ! -f "$dir/node_modules/.package-lock.json" || ! -f "$dir/node_modules/dynalite/cli.js" ]]; then
		echo "services: installing dynalite (npm ci in $dir)"
		# --ignore-scripts: classic-level ships prebuilt binaries, so nothing needs building.
		(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts)
	fi
	exec 9>&-
	echo "services: dynalite installed in $dir"
fi

[[ -n "${CHROMIUM_PATH:-}" ]] || apt_install chromium chromium
if ! command -v promtool >/dev/null; then
	apt_install prometheus prometheus
	# The package's own service is not wanted: the tests run a server of their own. On a
	# machine whose policy-rc.d or lack of systemd did not stop it from starting, stop it.
	if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
		systemctl disable --now prometheus >/dev/null 2>&1 || true
	else
		service prometheus stop >/dev/null 2>&1 || true
	fi
fi
echo "services: $(prometheus --version 2>&1 | head -n 1)"

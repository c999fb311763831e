// linkdelay: one direction of the test cluster's link with a fixed added
// latency, for kernels built without sch_netem (tc ... netem delay).
//
//   linkdelay FROM_NETNS FROM_TUN TO_NETNS TO_TUN DELAY_US
//
// The sending namespace routes its packets for the peer into FROM_TUN (a
// persistent TUN device, `ip tuntap add`); this process reads them, holds
// each DELAY_US microseconds and writes it into TO_TUN in the receiving
// namespace, which delivers it as if it had come over the wire. That is what
// `netem delay` on the sender's interface does: the sender's packets arrive
// late, the other direction is untouched. A constant delay keeps the order,
// so the queue is a FIFO. It holds at most 256 MiB; beyond that packets are
// dropped, like a full transmit queue (TCP resends them).
//
// Namespaces are names under /run/netns (ip netns add). The process enters
// each in turn to open its TUN device; a TUN file descriptor stays bound to
// its device afterwards. SIGTERM or SIGINT ends it. Used by
// tests/cluster/netns-cluster.bash (cluster_delay).
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t MAX_QUEUED_BYTES = size_t(256) << 20;
constexpr size_t MAX_PACKET = 65536;

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "linkdelay: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

void enter_netns(const std::string& name) {
  const std::string path = name.find('/') == std::string::npos ? "/run/netns/" + name : name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open " + path);
  if (setns(fd, CLONE_NEWNET) != 0) die("setns " + path);
  close(fd);
}

int open_tun(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) die("open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF " + name);
  return fd;
}

struct Packet {
  Clock::time_point due;
  std::vector<char> bytes;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: linkdelay FROM_NETNS FROM_TUN TO_NETNS TO_TUN DELAY_US\n");
    return 2;
  }
  const auto delay = std::chrono::microseconds(std::atoll(argv[5]));
  enter_netns(argv[1]);
  const int in = open_tun(argv[2]);
  enter_netns(argv[3]);
  const int out = open_tun(argv[4]);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);

  std::deque<Packet> queue;
  size_t queued = 0;
  std::vector<char> buf(MAX_PACKET);
  while (!stop_requested) {
    // Sleep until a packet arrives or the oldest one is due.
    timespec wait{1, 0};
    if (!queue.empty()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::nanoseconds>(queue.front().due - Clock::now());
      const long long ns = std::max<long long>(0, left.count());
      wait = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    }
    pollfd p{in, POLLIN, 0};
    ppoll(&p, 1, &wait, nullptr);
    for (;;) {
      const ssize_t n = read(in, buf.data(), buf.size());
      if (n <= 0) break;
      if (queued + static_cast<size_t>(n) > MAX_QUEUED_BYTES) continue;  // a full queue drops
      queue.push_back({Clock::now() + delay, std::vector<char>(buf.begin(), buf.begin() + n)});
      queued += static_cast<size_t>(n);
    }
    const auto now = Clock::now();
    while (!queue.empty() && queue.front().due <= now) {
      // A failed write loses the packet, as a wire can; TCP resends it.
      [[maybe_unused]] const ssize_t w = write(out, queue.front().bytes.data(), queue.front().bytes.size());
      queued -= queue.front().bytes.size();
      queue.pop_front();
    }
  }
  return 0;
}

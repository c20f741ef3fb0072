#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace ts::server {

namespace {

// addr's numeric host and port, as httplib formats the request's remote_addr (getnameinfo, NI_NUMERICHOST).
bool endpoint(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, s, sizeof s,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(s);
  return true;
}

}  // namespace

ConnectionWatch::ConnectionWatch(std::string remote_addr, int remote_port, int local_port)
    : remote_addr_(std::move(remote_addr)), remote_port_(remote_port), local_port_(local_port) {}

bool ConnectionWatch::is_our_socket(int fd) const {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (local.ss_family != AF_INET && local.ss_family != AF_INET6) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  std::string host, peer_host;
  int port = -1, peer_port = -1;
  return endpoint(local, local_len, &host, &port) && port == local_port_ &&
         endpoint(peer, peer_len, &peer_host, &peer_port) && peer_port == remote_port_ && peer_host == remote_addr_;
}

int ConnectionWatch::find_socket() const {
  if (remote_port_ < 0 || local_port_ < 0) return -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    if (is_our_socket(int(fd))) {
      found = int(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

bool ConnectionWatch::peer_closed() {
  if (fd_ >= 0 && !is_our_socket(fd_)) return true;  // our descriptor was closed (and perhaps reused)
  if (fd_ < 0) {
    if (searched_) return false;
    searched_ = true;
    fd_ = find_socket();
    if (fd_ < 0) return false;
  }
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, 0);
  if (ready <= 0) return false;                      // nothing to read: still open
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char byte;
  const ssize_t got = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got == 0) return true;                         // orderly close
  if (got < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
  return false;                                      // the client already sent its next request
}

}  // namespace ts::server

/* version.h - the release, as health, sanbox version, the MCP server and
 * an audit bundle give it.
 */
#ifndef SB_VERSION_H
#define SB_VERSION_H

#define SB_VERSION "0.1.0"

#endif

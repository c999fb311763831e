// hpcdata pack --from image-folder DIR: folders of JPEG/PNG files, one per
// class, into an hpctrain data file.
//
//   DIR/CLASS/**/*.jpg|jpeg|png    (torchvision's ImageFolder layout)
//
// Classes are the sub-folders of DIR sorted by name (hidden ones left out),
// ids 0, 1, … in that order, their names stored as the `classes` attribute
// of /SPLIT/y; a class's files are found recursively and taken in
// torchvision's order (by folder path, then name). /val is the --val
// folder (its classes matched to the training ones by name) or a fixed-seed
// random --val-fraction of DIR. Two ways to store the images:
//
//   --store jpeg (default)  the files' own bytes (JPEG or PNG), one after the
//       other in /SPLIT/images with an offsets index, decoded by the loader
//       (data/image_dataset.h); with --max-side S or --quality Q every image
//       is decoded and re-encoded as JPEG (quality Q, default 90), shrunk
//       first so that its longer side is at most S. `size` (--size, default
//       224) is the side samples are decoded to unless training asks for
//       random_resized_crop:SIZE.
//   --store raw --size S|HxW  decoded and resized to H × W (PIL's bilinear,
//       aspect ratio not kept) into /SPLIT/x uint8 N × 3 × H × W, the layout
//       every other hpcdata input has; without --size all images must have
//       one size.
//
// Either way mean and std attributes hold the training pixels' per-channel
// statistics on the 0-1 scale (exact, from histograms). Files are read and
// decoded by --threads workers (default: every core), written in order.
// A file that is not a decodable image is named and, with --on-error skip,
// left out and counted; with --on-error fail (the default) it ends the run
// (exit 2). A full disk is exit 74. Nothing half-written stays behind: the
// output and the temporary spill files are removed on any error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc::data_tools {

class DatasetWriter;
struct PackOptions;

struct ImageFolderOptions {
  std::string store = "jpeg";     // jpeg | raw
  int64_t height = 0, width = 0;  // --size: raw: the stored size (0: the images' own); jpeg: decode side
  int64_t max_side = 0;           // jpeg: re-encode, longer side at most this (0: no limit)
  int quality = 0;                // jpeg: re-encode at this quality (0: keep the files' bytes)
  int threads = 0;                // 0: every core
  bool skip_errors = false;       // --on-error skip (else fail)
  bool reencode() const { return max_side > 0 || quality > 0; }
};

// True when `name` ("--store") is one of the options above; set_image_option
// then parses its value into `o` (UserError for a bad value).
bool is_image_option(const std::string& name);
void set_image_option(const std::string& name, const std::string& value, ImageFolderOptions& o);

// One image file and its class id.
struct ImageFile {
  std::string path;
  int32_t label = 0;
};

// The classes (sorted sub-folder names) and files of DIR; UserError for a
// missing or empty folder, or a class folder without images. `ignored`
// counts other files (other extensions, files directly in DIR).
struct ImageFolder {
  std::vector<std::string> classes;
  std::vector<ImageFile> files;
  int64_t ignored = 0, bytes = 0;
};
ImageFolder scan_image_folder(const std::string& dir);

// The whole pack: scan, decode, write through `w`, commit, print the summary.
void pack_image_folder(DatasetWriter& w, const PackOptions& opt);

}  // namespace hpc::data_tools

#include "data/image_decode.h"

// libjpeg and libpng report fatal errors through a callback that must not return; the callbacks
// here longjmp back to the setjmp of the "step" function that called into the library. Invariant:
// step functions (jpeg_step_* / png_step_*) create no C++ object with a destructor and touch only
// raw pointers, so the jump skips nothing; every C++ allocation happens in their callers, between
// steps. The caller turns a failed step into a DataError.
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

// jpeglib.h needs FILE and size_t declared first; jerror.h needs jpeglib.h.
#include <jerror.h>
#include <jpeglib.h>

#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {
namespace {

// ------------------------------------------------------------------------------------ JPEG ---

struct JpegErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings that mean the pixels are wrong (libjpeg would silently fill them with gray) are fatal,
// like a truncated file; cosmetic ones (extraneous bytes, unknown JFIF revision) are ignored.
void jpeg_on_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
      jpeg_on_error(cinfo);
      break;
    default:
      break;
  }
}

/// Owns a decompressor; destroyed (which also aborts a started decode) when it goes out of scope.
struct JpegSession {
  jpeg_decompress_struct cinfo{};
  JpegErrorMgr err{};
  bool created = false;
  JpegSession() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jpeg_on_error;
    err.pub.emit_message = jpeg_on_message;
  }
  ~JpegSession() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  JpegSession(const JpegSession&) = delete;
  JpegSession& operator=(const JpegSession&) = delete;
};

bool jpeg_step_open(JpegSession* s, const uint8_t* data, size_t size) {
  if (setjmp(s->err.jump)) return false;
  jpeg_create_decompress(&s->cinfo);
  s->created = true;
  jpeg_mem_src(&s->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&s->cinfo, TRUE);
  return true;
}

// JDCT_ISLOW and fancy upsampling are libjpeg's defaults, and what Pillow uses: results match it.
bool jpeg_step_start(JpegSession* s, J_COLOR_SPACE out_space, int scale_num) {
  if (setjmp(s->err.jump)) return false;
  s->cinfo.out_color_space = out_space;
  s->cinfo.scale_num = static_cast<unsigned int>(scale_num);
  s->cinfo.scale_denom = 8;
  s->cinfo.dct_method = JDCT_ISLOW;
  s->cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&s->cinfo);
  return true;
}

bool jpeg_step_crop(JpegSession* s, JDIMENSION* x_offset, JDIMENSION* width) {
  if (setjmp(s->err.jump)) return false;
  jpeg_crop_scanline(&s->cinfo, x_offset, width);
  return true;
}

bool jpeg_step_skip(JpegSession* s, JDIMENSION rows) {
  if (setjmp(s->err.jump)) return false;
  if (rows > 0 && jpeg_skip_scanlines(&s->cinfo, rows) != rows) {
    std::snprintf(s->err.message, sizeof(s->err.message), "could not skip %u scanlines", rows);
    return false;
  }
  return true;
}

// Reads `rows` scanlines into out (row stride `stride` bytes).
bool jpeg_step_read(JpegSession* s, uint8_t* out, size_t stride, JDIMENSION rows) {
  if (setjmp(s->err.jump)) return false;
  for (JDIMENSION done = 0; done < rows;) {
    JSAMPROW row = out + static_cast<size_t>(done) * stride;
    JDIMENSION got = jpeg_read_scanlines(&s->cinfo, &row, 1);
    if (got == 0) {
      std::snprintf(s->err.message, sizeof(s->err.message), "decoder returned no scanline");
      return false;
    }
    done += got;
  }
  return true;
}

[[noreturn]] void throw_decode_error(const std::string& name, const char* format,
                                     const char* library_message) {
  throw DataError("cannot decode " + std::string(format) + " image '" + name +
                  "': " + library_message);
}

void jpeg_open_or_throw(JpegSession& s, const uint8_t* data, size_t size, const std::string& name) {
  if (!jpeg_step_open(&s, data, size)) throw_decode_error(name, "JPEG", s.err.message);
}

bool is_cmyk(const JpegSession& s) {
  return s.cinfo.jpeg_color_space == JCS_CMYK || s.cinfo.jpeg_color_space == JCS_YCCK;
}

// x * y / 255 rounded, in Pillow's integer form (MULDIV255).
inline int muldiv255(int x, int y) {
  const int t = x * y + 128;
  return ((t >> 8) + t) >> 8;
}

// (H, W, 4) CMYK as libjpeg hands it (YCCK already turned into CMYK) to (H, W, channels) RGB or
// gray, exactly as Pillow does: it reads CMYK JPEGs as Adobe-inverted ("CMYK;I") and converts
// with R = (255 - K) - (255 - K) * C / 255 per channel, gray from RGB with L = 0.299 R + 0.587 G
// + 0.114 B in 16-bit fixed point.
at::Tensor cmyk_to_rgb(const at::Tensor& cmyk, int64_t channels) {
  const int64_t h = cmyk.size(0), w = cmyk.size(1);
  at::Tensor out = at::empty({h, w, channels}, at::kByte);  // (H, W, channels)
  const uint8_t* src = cmyk.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < h * w; ++i, src += 4, dst += channels) {
    const int nk = src[3];  // 255 - K with K = 255 - raw
    int rgb[3];
    for (int c = 0; c < 3; ++c) rgb[c] = std::clamp(nk - muldiv255(255 - src[c], nk), 0, 255);
    if (channels == 3) {
      for (int c = 0; c < 3; ++c) dst[c] = static_cast<uint8_t>(rgb[c]);
    } else {
      dst[0] =
          static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
    }
  }
  return out;
}

J_COLOR_SPACE jpeg_out_space(const JpegSession& s, int channels, const std::string& name) {
  if (channels != 0 && channels != 1 && channels != 3) {
    throw DataError("cannot decode image '" + name + "': channels must be 0, 1 or 3, got " +
                    std::to_string(channels));
  }
  if (is_cmyk(s)) return JCS_CMYK;  // converted after decoding (cmyk_to_rgb)
  bool gray = s.cinfo.jpeg_color_space == JCS_GRAYSCALE;
  if (channels == 0) channels = gray ? 1 : 3;
  return channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
}

at::Tensor to_layout(at::Tensor hwc, ImageLayout layout) {
  return layout == ImageLayout::kHWC ? hwc : hwc.permute({2, 0, 1}).contiguous();
}

at::Tensor decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int channels,
                       ImageLayout layout) {
  JpegSession s;
  jpeg_open_or_throw(s, data, size, name);
  if (!jpeg_step_start(&s, jpeg_out_space(s, channels, name), 8)) {
    throw_decode_error(name, "JPEG", s.err.message);
  }
  const int64_t h = s.cinfo.output_height, w = s.cinfo.output_width;
  const int64_t c = s.cinfo.output_components;
  at::Tensor hwc = at::empty({h, w, c}, at::kByte);  // (H, W, C)
  if (!jpeg_step_read(&s, hwc.data_ptr<uint8_t>(), static_cast<size_t>(w * c),
                      static_cast<JDIMENSION>(h))) {
    throw_decode_error(name, "JPEG", s.err.message);
  }
  if (s.cinfo.out_color_space == JCS_CMYK) hwc = cmyk_to_rgb(hwc, channels == 1 ? 1 : 3);
  return to_layout(hwc, layout);
}

// ------------------------------------------------------------------------------------- PNG ---

struct PngSession {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char message[256] = {0};
  ~PngSession() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* s = static_cast<PngSession*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof(s->message), "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // e.g. bad sRGB profiles: pixels are fine

void png_on_read(png_structp png, png_bytep out, size_t count) {
  auto* s = static_cast<PngSession*>(png_get_io_ptr(png));
  if (s->size - s->pos < count) png_error(png, "unexpected end of file (truncated PNG)");
  std::memcpy(out, s->data + s->pos, count);
  s->pos += count;
}

// Reads the header and, when `channels` >= 0, installs the transforms to 8-bit gray (1) or RGB (3);
// `channels` 0 picks the native count. Outputs the geometry after the transforms.
bool png_step_open(PngSession* s, int channels, int64_t* h, int64_t* w, int64_t* c) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_set_read_fn(s->png, s, png_on_read);
  png_read_info(s->png, s->info);
  const int color_type = png_get_color_type(s->png, s->info);
  const bool gray = (color_type & PNG_COLOR_MASK_COLOR) == 0;  // palette images count as colour
  *h = png_get_image_height(s->png, s->info);
  *w = png_get_image_width(s->png, s->info);
  *c = gray ? 1 : 3;
  if (channels < 0) return true;
  const int want = channels == 0 ? static_cast<int>(*c) : channels;
  png_set_expand(s->png);  // palette -> RGB, gray < 8 bit -> 8 bit, tRNS -> alpha
  if (png_get_bit_depth(s->png, s->info) == 16) png_set_strip_16(s->png);
  png_set_strip_alpha(s->png);
  if (want == 3 && gray) png_set_gray_to_rgb(s->png);
  if (want == 1 && !gray) png_set_rgb_to_gray_fixed(s->png, 1, -1, -1);
  png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  *c = png_get_channels(s->png, s->info);
  if (*c != want || png_get_rowbytes(s->png, s->info) != static_cast<size_t>(*w * want)) {
    png_error(s->png, "unexpected row layout after conversion to 8-bit");
  }
  return true;
}

bool png_step_read(PngSession* s, png_bytep* rows) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_read_image(s->png, rows);
  return true;
}

void png_create_or_throw(PngSession& s, const uint8_t* data, size_t size, const std::string& name) {
  s.data = data;
  s.size = size;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_on_error, png_on_warning);
  if (s.png != nullptr) s.info = png_create_info_struct(s.png);
  if (s.png == nullptr || s.info == nullptr) {
    throw DataError("cannot decode PNG image '" + name + "': libpng could not allocate a reader");
  }
}

at::Tensor decode_png(const uint8_t* data, size_t size, const std::string& name, int channels,
                      ImageLayout layout) {
  if (channels != 0 && channels != 1 && channels != 3) {
    throw DataError("cannot decode image '" + name + "': channels must be 0, 1 or 3, got " +
                    std::to_string(channels));
  }
  PngSession s;
  png_create_or_throw(s, data, size, name);
  int64_t h = 0, w = 0, c = 0;
  if (!png_step_open(&s, channels, &h, &w, &c)) throw_decode_error(name, "PNG", s.message);
  at::Tensor hwc = at::empty({h, w, c}, at::kByte);  // (H, W, C)
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (int64_t y = 0; y < h; ++y) rows[y] = hwc.data_ptr<uint8_t>() + y * w * c;
  if (!png_step_read(&s, rows.data())) throw_decode_error(name, "PNG", s.message);
  return to_layout(hwc, layout);
}

// --------------------------------------------------------------------------------- PNG out ---

struct PngWriteSession {
  png_structp png = nullptr;
  png_infop info = nullptr;
  FILE* file = nullptr;
  char message[256] = {0};
  ~PngWriteSession() {
    if (png != nullptr) png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
    if (file != nullptr) std::fclose(file);
  }
};

void png_on_write_error(png_structp png, png_const_charp message) {
  auto* s = static_cast<PngWriteSession*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof(s->message), "%s", message);
  png_longjmp(png, 1);
}

bool png_step_write(PngWriteSession* s, png_bytep* rows, uint32_t h, uint32_t w, int c) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_init_io(s->png, s->file);
  png_set_IHDR(s->png, s->info, w, h, 8, c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(s->png, s->info);
  png_write_image(s->png, rows);
  png_write_end(s->png, nullptr);
  return true;
}

}  // namespace

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DataError("cannot open file '" + path + "': " + std::strerror(errno));
  const std::streamoff size = in.tellg();
  std::string bytes(static_cast<size_t>(std::max<std::streamoff>(size, 0)), '\0');
  in.seekg(0);
  if (size < 0 || !in.read(bytes.data(), size)) {
    throw DataError("cannot read file '" + path + "' (" + std::to_string(size) + " bytes)");
  }
  return bytes;
}

bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

bool is_png(const uint8_t* data, size_t size) {
  return size >= 8 && png_sig_cmp(data, 0, 8) == 0;
}

ImageInfo read_image_info(const uint8_t* data, size_t size, const std::string& name) {
  ImageInfo info;
  if (is_jpeg(data, size)) {
    JpegSession s;
    jpeg_open_or_throw(s, data, size, name);
    info.height = s.cinfo.image_height;
    info.width = s.cinfo.image_width;
    info.channels = s.cinfo.jpeg_color_space == JCS_GRAYSCALE ? 1 : 3;  // CMYK decodes to RGB
  } else if (is_png(data, size)) {
    PngSession s;
    png_create_or_throw(s, data, size, name);
    if (!png_step_open(&s, -1, &info.height, &info.width, &info.channels)) {
      throw_decode_error(name, "PNG", s.message);
    }
  } else {
    throw DataError("cannot decode image '" + name + "': not a JPEG or PNG file (" +
                    std::to_string(size) + " bytes, unknown signature)");
  }
  return info;
}

at::Tensor decode_image(const uint8_t* data, size_t size, const std::string& name, int channels,
                        ImageLayout layout) {
  if (is_jpeg(data, size)) return decode_jpeg(data, size, name, channels, layout);
  if (is_png(data, size)) return decode_png(data, size, name, channels, layout);
  throw DataError("cannot decode image '" + name + "': not a JPEG or PNG file (" +
                  std::to_string(size) + " bytes, unknown signature)");
}

at::Tensor decode_image_file(const std::string& path, int channels, ImageLayout layout) {
  const std::string bytes = read_file_bytes(path);
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, channels,
                      layout);
}

JpegRegion decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name,
                              const CropRect& rect, int64_t min_height, int64_t min_width,
                              int channels) {
  JpegSession s;
  jpeg_open_or_throw(s, data, size, name);
  const int64_t full_h = s.cinfo.image_height, full_w = s.cinfo.image_width;
  if (rect.height <= 0 || rect.width <= 0 || rect.top < 0 || rect.left < 0 ||
      rect.top + rect.height > full_h || rect.left + rect.width > full_w) {
    throw DataError(fmt::format(
        "cannot decode region of JPEG '{}': rect top={} left={} height={} width={} is not inside "
        "the {}x{} image",
        name, rect.top, rect.left, rect.height, rect.width, full_h, full_w));
  }
  // Smallest scale N/8, N in {1, 2, 4, 8}, whose scaled rectangle still holds the requested
  // resolution. libjpeg-turbo also offers the other N/8, but only these have SIMD inverse DCTs:
  // on 400x350 photos cropped to 224 the scalar 7/8 or 6/8 decode costs more than the full-size
  // decode it saves (1,090 vs 1,320 images/s on one core).
  int num = 8;
  for (int n : {1, 2, 4}) {
    if (rect.height * n >= min_height * 8 && rect.width * n >= min_width * 8) {
      num = n;
      break;
    }
  }
  if (!jpeg_step_start(&s, jpeg_out_space(s, channels, name), num)) {
    throw_decode_error(name, "JPEG", s.err.message);
  }
  const double f = num / 8.0;  // scaled pixels per source pixel
  const int64_t out_w = s.cinfo.output_width, out_h = s.cinfo.output_height;
  const double y0 = rect.top * f, x0 = rect.left * f, h = rect.height * f, w = rect.width * f;
  // Two pixels of margin so that bilinear sampling at the rectangle's edges sees real neighbours.
  constexpr int64_t kMargin = 2;
  const int64_t row0 = std::max<int64_t>(0, static_cast<int64_t>(std::floor(y0)) - kMargin);
  const int64_t row1 = std::min<int64_t>(out_h, static_cast<int64_t>(std::ceil(y0 + h)) + kMargin);
  const int64_t col0 = std::max<int64_t>(0, static_cast<int64_t>(std::floor(x0)) - kMargin);
  const int64_t col1 = std::min<int64_t>(out_w, static_cast<int64_t>(std::ceil(x0 + w)) + kMargin);
  // libjpeg widens the column range to iMCU boundaries and reports what it chose.
  auto x_offset = static_cast<JDIMENSION>(col0);
  auto crop_w = static_cast<JDIMENSION>(col1 - col0);
  if (!jpeg_step_crop(&s, &x_offset, &crop_w) ||
      !jpeg_step_skip(&s, static_cast<JDIMENSION>(row0))) {
    throw_decode_error(name, "JPEG", s.err.message);
  }
  const int64_t c = s.cinfo.output_components;
  const int64_t rows = row1 - row0;
  at::Tensor hwc = at::empty({rows, static_cast<int64_t>(crop_w), c}, at::kByte);  // (h, w, C)
  if (!jpeg_step_read(&s, hwc.data_ptr<uint8_t>(), static_cast<size_t>(crop_w * c),
                      static_cast<JDIMENSION>(rows))) {
    throw_decode_error(name, "JPEG", s.err.message);
  }
  if (s.cinfo.out_color_space == JCS_CMYK) hwc = cmyk_to_rgb(hwc, channels == 1 ? 1 : 3);
  JpegRegion region;
  region.image = hwc.permute({2, 0, 1});  // a view: resize reads the (h, w, C) buffer in place
  region.rect = rect;
  region.scale = f;
  region.scale_num = num;
  region.origin_top = row0;
  region.origin_left = static_cast<int64_t>(x_offset);
  return region;
}

void write_png(const std::string& path, const at::Tensor& image_chw) {
  if (image_chw.scalar_type() != at::kByte || image_chw.dim() != 3 ||
      (image_chw.size(0) != 1 && image_chw.size(0) != 3)) {
    throw DataError(fmt::format("write_png '{}': expected uint8 (C, H, W) with C 1 or 3, got {} {}",
                                path, std::string(c10::toString(image_chw.scalar_type())),
                                fmt::join(image_chw.sizes(), "x")));
  }
  at::Tensor hwc = image_chw.permute({1, 2, 0}).contiguous().cpu();  // (H, W, C)
  const int64_t h = hwc.size(0), w = hwc.size(1), c = hwc.size(2);
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (int64_t y = 0; y < h; ++y) rows[y] = hwc.data_ptr<uint8_t>() + y * w * c;
  PngWriteSession s;
  s.file = std::fopen(path.c_str(), "wb");
  if (s.file == nullptr) {
    throw DataError("write_png: cannot open '" + path + "' for writing: " + std::strerror(errno));
  }
  s.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, png_on_write_error, png_on_warning);
  if (s.png != nullptr) s.info = png_create_info_struct(s.png);
  if (s.png == nullptr || s.info == nullptr) {
    throw DataError("write_png '" + path + "': libpng could not allocate a writer");
  }
  if (!png_step_write(&s, rows.data(), static_cast<uint32_t>(h), static_cast<uint32_t>(w),
                      static_cast<int>(c))) {
    throw DataError("write_png '" + path + "': " + s.message);
  }
  if (std::fflush(s.file) != 0) {
    throw DataError("write_png '" + path + "': write failed: " + std::strerror(errno));
  }
}

}  // namespace brrr
